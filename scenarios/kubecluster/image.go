package kubecluster

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image describes an image of one static binary.
type Image struct {
	// Ref names it, "teapot.test/echo:1"; pods use this name with
	// imagePullPolicy Never or IfNotPresent.
	Ref string
	// Binary is the static executable, placed at /Entrypoint[0].
	Binary     string
	Entrypoint []string
	// User is the default user, "65532:65532" (empty: root).
	User string
}

// WriteImage packs img as a docker-archive tarball at out, which
// `ctr images import` reads.
func WriteImage(img Image, out string) error {
	if len(img.Entrypoint) == 0 {
		return fmt.Errorf("image %s: no entrypoint", img.Ref)
	}
	tag, err := name.NewTag(img.Ref)
	if err != nil {
		return fmt.Errorf("image ref %q: %w", img.Ref, err)
	}
	bin, err := os.ReadFile(img.Binary)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	target := img.Entrypoint[0]
	dirs := []string{}
	for d := path.Dir(target); d != "/" && d != "."; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range append(dirs, "/tmp") {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o1777}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: target[1:], Mode: 0o755, Size: int64(len(bin))}); err != nil {
		return err
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerData := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerData)), nil
	})
	if err != nil {
		return err
	}
	image, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := image.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Entrypoint: img.Entrypoint, User: img.User, Env: []string{"PATH=/"}}
	image, err = mutate.ConfigFile(image, cf)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, image)
}
