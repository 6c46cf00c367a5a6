// Command teapot-pkg builds teapot-lb's release artefacts from binaries
// that `make` cross-compiled: the agent's OCI image (image), the deb and
// rpm packages (package).
// Every timestamp comes from SOURCE_DATE_EPOCH, so equal inputs give equal
// bytes.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/teapot-lb/teapot-lb/packaging/image"
)

func main() {
	root := &cobra.Command{Use: "teapot-pkg", Short: "Build teapot-lb's packages and image", SilenceUsage: true}
	root.AddCommand(imageCmd())
	root.AddCommand(packageCmd())
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}

// common are the settings of every build.
type common struct {
	version, revision, dist string
	arches                  []string
}

func (c *common) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.version, "version", "", "version (git describe)")
	f.StringVar(&c.revision, "revision", "", "source commit")
	f.StringVar(&c.dist, "dist", "dist", "output folder; binaries are read from DIST/bin/ARCH/teapot-lb")
	f.StringSliceVar(&c.arches, "arch", []string{"amd64", "arm64"}, "architectures")
	_ = cmd.MarkFlagRequired("version")
}

// epoch reads SOURCE_DATE_EPOCH (seconds); it must be set.
func epoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH is not set: set it to the commit time (git log -1 --format=%%ct)")
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

func (c *common) binaries() map[string]string {
	m := map[string]string{}
	for _, a := range c.arches {
		m[a] = fmt.Sprintf("%s/bin/%s/teapot-lb", c.dist, a)
	}
	return m
}

func imageCmd() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build the agent's multi-arch OCI image as DIST/teapot-lb-agent_VERSION.oci.tar",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			t, err := epoch()
			if err != nil {
				return err
			}
			idx, err := image.Build(image.Config{Version: c.version, Revision: c.revision, Created: t, Binaries: c.binaries()})
			if err != nil {
				return err
			}
			tmp, err := os.MkdirTemp(c.dist, ".oci-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			layoutDir := tmp + "/layout"
			if err := image.WriteLayout(layoutDir, idx, image.Names(c.version)); err != nil {
				return err
			}
			out := fmt.Sprintf("%s/teapot-lb-agent_%s.oci.tar", c.dist, c.version)
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			if err := image.TarDir(f, layoutDir, t); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			d, err := idx.Digest()
			if err != nil {
				return err
			}
			fmt.Printf("%s\n  %s\n  index %s\n", out, strings.Join(image.Names(c.version), "\n  "), d)
			return nil
		},
	}
	c.flags(cmd)
	return cmd
}
