package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
	"github.com/spf13/cobra"
)

// host is where the files of the host packages live in the repository.
const host = "packaging/host"

const maintainer = "teapot-lb maintainers <teapot-lb@users.noreply.github.com>"

const description = `multi-tenant load balancer appliance
 teapot-lb runs on a small cluster of dedicated LB hosts and gives every
 tenant Kubernetes cluster LoadBalancer Services (L4 TCP/UDP) and Ingresses
 (L7 HTTP/HTTPS with TLS termination and ACME certificates) on highly
 available virtual IPs, announced by ARP/NDP or BGP. This package holds the
 static teapot-lb binary, its systemd unit and its configuration file.`

var describeRE = regexp.MustCompile(`^v?(\d+(?:\.\d+)*)(?:-(\d+)-g([0-9a-f]+))?(-dirty)?$`)

// PackageVersion turns `git describe --tags --always --dirty` into a
// version deb and rpm order correctly: v1.2.3 is 1.2.3, three commits
// later 1.2.3+3.gHASH; without a tag 0.0.0+gHASH.
func PackageVersion(describe string) string {
	d := strings.TrimSpace(describe)
	if m := describeRE.FindStringSubmatch(d); m != nil {
		v := m[1]
		if m[2] != "" {
			v += "+" + m[2] + ".g" + m[3]
		}
		if m[4] != "" {
			v += "+dirty"
			if m[2] != "" {
				v = strings.Replace(v, "+dirty", ".dirty", 1)
			}
		}
		return v
	}
	d = strings.TrimSuffix(d, "-dirty")
	v := "0.0.0+g" + regexp.MustCompile(`[^0-9A-Za-z.]`).ReplaceAllString(d, ".")
	if strings.HasSuffix(strings.TrimSpace(describe), "-dirty") {
		v += ".dirty"
	}
	return v
}

// packageFormats are the formats package builds, in the order it builds
// them.
var packageFormats = []string{"deb", "rpm"}

// formatsOf checks the formats --format names and returns them in
// packageFormats' order, each once.
func formatsOf(names []string) ([]string, error) {
	want := map[string]bool{}
	for _, n := range names {
		if !slices.Contains(packageFormats, n) {
			return nil, fmt.Errorf("--format %q: not a package format (%s)", n, strings.Join(packageFormats, ", "))
		}
		want[n] = true
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("--format: no format named (%s)", strings.Join(packageFormats, ", "))
	}
	var out []string
	for _, f := range packageFormats {
		if want[f] {
			out = append(out, f)
		}
	}
	return out, nil
}

func packageCmd() *cobra.Command {
	var c common
	var formatNames []string
	cmd := &cobra.Command{
		Use:   "package",
		Short: "Build DIST/teapot-lb_VERSION_ARCH.deb and .rpm (--format) for every architecture",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			formats, err := formatsOf(formatNames)
			if err != nil {
				return err
			}
			t, err := epoch()
			if err != nil {
				return err
			}
			work, err := os.MkdirTemp(c.dist, ".pkg-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
			version := PackageVersion(c.version)
			if err := generated(work, c.binaries(), t, version); err != nil {
				return err
			}
			for _, arch := range c.arches {
				for _, format := range formats {
					out, err := buildPackage(work, c.dist, format, arch, c.binaries()[arch], version, t)
					if err != nil {
						return fmt.Errorf("%s %s: %w", format, arch, err)
					}
					fmt.Println(out)
				}
			}
			return nil
		},
	}
	c.flags(cmd)
	cmd.Flags().StringSliceVar(&formatNames, "format", packageFormats, "package formats: deb, rpm")
	return cmd
}

// generated writes what comes from the command tree into work: the
// completions, the man pages (gzipped without names or times) and the
// Debian changelog.
func generated(work string, bins map[string]string, t time.Time, version string) error {
	bin := bins[runtime.GOARCH]
	if bin == "" {
		bin = bins["amd64"]
	}
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", t.Unix()))
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s %v: %w", bin, args, err)
		}
		return out, nil
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, err := run("completion", sh)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(work, "completion."+sh), out, 0o644); err != nil {
			return err
		}
	}
	raw := filepath.Join(work, "man-raw")
	if _, err := run("gen-man", raw); err != nil {
		return err
	}
	pages, err := os.ReadDir(raw)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(work, "man"), 0o755); err != nil {
		return err
	}
	for _, p := range pages {
		data, err := os.ReadFile(filepath.Join(raw, p.Name()))
		if err != nil {
			return err
		}
		if err := writeGzip(filepath.Join(work, "man", p.Name()+".gz"), data); err != nil {
			return err
		}
	}
	changelog := fmt.Sprintf("teapot-lb (%s-1) unstable; urgency=medium\n\n  * teapot-lb %s.\n\n -- %s  %s\n",
		version, version, maintainer, t.Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	return writeGzip(filepath.Join(work, "changelog.Debian.gz"), []byte(changelog))
}

func writeGzip(path string, data []byte) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// debRPMCompression is the packages' payload compression.
const debRPMCompression = "gzip:6"

func buildPackage(work, dist, format, arch, bin, version string, t time.Time) (string, error) {
	unitDir := "/lib/systemd/system"
	if format == "rpm" {
		unitDir = "/usr/lib/systemd/system"
	}
	pages, err := filepath.Glob(filepath.Join(work, "man", "*.gz"))
	if err != nil {
		return "", err
	}
	var contents strings.Builder
	add := func(src, dst, typ string, mode os.FileMode) {
		fmt.Fprintf(&contents, "  - src: %q\n    dst: %q\n", src, dst)
		if typ != "" {
			fmt.Fprintf(&contents, "    type: %s\n", typ)
		}
		fmt.Fprintf(&contents, "    file_info: {mode: 0%o, owner: root, group: root}\n", mode)
	}
	add(bin, "/usr/bin/teapot-lb", "", 0o755)
	add(filepath.Join(host, "teapot-lb.service"), unitDir+"/teapot-lb.service", "", 0o644)
	add(filepath.Join(host, "serve.yaml"), "/etc/teapot-lb/serve.yaml", "config|noreplace", 0o644)
	add(filepath.Join(work, "completion.bash"), "/usr/share/bash-completion/completions/teapot-lb", "", 0o644)
	add(filepath.Join(work, "completion.zsh"), "/usr/share/zsh/vendor-completions/_teapot-lb", "", 0o644)
	add(filepath.Join(work, "completion.fish"), "/usr/share/fish/vendor_completions.d/teapot-lb.fish", "", 0o644)
	for _, p := range pages {
		add(p, "/usr/share/man/man1/"+filepath.Base(p), "", 0o644)
	}
	// For the operator's monitoring: the Grafana dashboard and the
	// Prometheus alerting rules with their unit tests.
	add("packaging/grafana/teapot-lb.json", "/usr/share/teapot-lb/grafana/teapot-lb.json", "", 0o644)
	add("packaging/prometheus/teapot-lb.rules.yml", "/usr/share/teapot-lb/prometheus/teapot-lb.rules.yml", "", 0o644)
	add("packaging/prometheus/teapot-lb.rules.test.yml", "/usr/share/teapot-lb/prometheus/teapot-lb.rules.test.yml", "", 0o644)
	if format == "deb" {
		add(filepath.Join(host, "deb", "copyright"), "/usr/share/doc/teapot-lb/copyright", "", 0o644)
		add(filepath.Join(work, "changelog.Debian.gz"), "/usr/share/doc/teapot-lb/changelog.Debian.gz", "", 0o644)
		// Go binaries are static on purpose: the host needs no libraries.
		add(filepath.Join(host, "deb", "lintian-overrides"), "/usr/share/lintian/overrides/teapot-lb", "", 0o644)
	}
	scripts := map[string]string{
		"deb": fmt.Sprintf("  postinstall: %s/deb/postinst\n  preremove: %s/deb/prerm\n  postremove: %s/deb/postrm\n", host, host, host),
		"rpm": fmt.Sprintf("  preinstall: %s/rpm/pre\n  postinstall: %s/rpm/post\n  preremove: %s/rpm/preun\n  postremove: %s/rpm/postun\n", host, host, host, host),
	}[format]
	depends := map[string]string{"deb": "adduser", "rpm": "shadow-utils"}[format]
	// nft marks the replies to member connections made from clients'
	// addresses (pools.*.clientSource); without it those pools are refused
	// with an event, and nothing else needs it.
	recommends := "nftables"
	conf := fmt.Sprintf(`name: teapot-lb
arch: %s
platform: linux
version: %q
version_schema: none
release: "1"
section: net
priority: optional
maintainer: %s
vendor: teapot-lb
homepage: https://github.com/teapot-lb/teapot-lb
license: Unspecified
description: %q
depends: [%s]
recommends: [%s]
contents:
%sscripts:
%s`, arch, version, maintainer, description, depends, recommends, contents.String(), scripts)
	cfg, err := nfpm.Parse(strings.NewReader(conf))
	if err != nil {
		return "", fmt.Errorf("nfpm config: %w", err)
	}
	info, err := cfg.Get(format)
	if err != nil {
		return "", err
	}
	info.MTime = t
	// gzip at level 6, not nfpm's 9: every dpkg and rpm reads it, and on
	// the binary it is 0.8 % larger for a third of the CPU time.
	info.Deb.Compression, info.RPM.Compression = debRPMCompression, debRPMCompression
	info = nfpm.WithDefaults(info)
	pkg, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dist, pkg.ConventionalFileName(info))
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	info.Target = out
	if err := pkg.Package(info, f); err != nil {
		f.Close()
		os.Remove(out)
		return "", err
	}
	return out, f.Close()
}
