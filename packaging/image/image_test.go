package image

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func TestBuildIsReproducibleAndShaped(t *testing.T) {
	dir := t.TempDir()
	bins := map[string]string{}
	for _, arch := range []string{"arm64", "amd64"} {
		p := filepath.Join(dir, arch)
		if err := os.WriteFile(p, []byte("binary for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		bins[arch] = p
	}
	cfg := Config{Version: "1.2.3", Revision: "abc", Created: time.Unix(1700000000, 0).UTC(), Binaries: bins}
	build := func() ([]byte, string) {
		idx, err := Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "layout")
		if err := WriteLayout(out, idx, Names(cfg.Version)); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := TarDir(&buf, out, cfg.Created); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes(), d.String()
	}
	tar1, d1 := build()
	tar2, d2 := build()
	if d1 != d2 || !bytes.Equal(tar1, tar2) {
		t.Fatalf("two builds differ: %s vs %s (tarballs equal: %v)", d1, d2, bytes.Equal(tar1, tar2))
	}

	idx, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 || im.MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index: %s with %d manifests, want an OCI index of 2", im.MediaType, len(im.Manifests))
	}
	for i, want := range []string{"amd64", "arm64"} {
		desc := im.Manifests[i]
		if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != want {
			t.Fatalf("manifest %d platform %+v, want linux/%s", i, desc.Platform, want)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if c.User != "65532:65532" || len(c.Entrypoint) != 2 || c.Entrypoint[0] != Binary || c.Entrypoint[1] != "agent" {
			t.Errorf("%s: user %q entrypoint %q", want, c.User, c.Entrypoint)
		}
		if c.Labels["org.opencontainers.image.version"] != "1.2.3" || c.Labels["org.opencontainers.image.source"] == "" {
			t.Errorf("%s: labels %v", want, c.Labels)
		}
		if cf.Architecture != want || !cf.Created.Time.Equal(cfg.Created) {
			t.Errorf("%s: config arch %s created %v", want, cf.Architecture, cf.Created)
		}
		mf, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if mf.MediaType != "application/vnd.oci.image.manifest.v1+json" || len(mf.Layers) != 1 {
			t.Errorf("%s: manifest %s with %d layers", want, mf.MediaType, len(mf.Layers))
		}
	}

	// The layout names every build by version and by the floating tag.
	out := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(out, idx, Names("1.2.3")); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range tm.Manifests {
		names = append(names, m.Annotations["io.containerd.image.name"])
	}
	if len(names) != 2 || names[0] != Repository+":1.2.3" || names[1] != Repository+":latest" {
		t.Fatalf("layout names %v", names)
	}
}

func TestRootfsHasNoShell(t *testing.T) {
	data, err := rootfs([]byte("x"), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"bin/sh", "bin/bash", "busybox"} {
		if bytes.Contains(data, []byte(bad)) {
			t.Errorf("the layer names %s", bad)
		}
	}
}
