// Package image builds the agent's OCI image without a container daemon:
// one layer per architecture holding the static teapot-lb binary and the
// files a non-root process expects (/etc/passwd, /etc/group, /tmp), an
// entrypoint of `teapot-lb agent`, user 65532, no shell, and a multi-arch
// index written as an OCI layout tarball. Every timestamp comes from the
// caller's epoch, so the same binaries give the same digests.
package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Repository is the image's name; the manifests and the Helm chart use it.
const Repository = "ghcr.io/teapot-lb/teapot-lb"

// FloatingTag is the second name every build carries, the one the
// committed manifests and the chart's default values use.
const FloatingTag = "latest"

// UID is the user the agent runs as (and the manifests' runAsUser).
const UID = 65532

// Binary is where the layer puts the executable.
const Binary = "/usr/bin/teapot-lb"

// Config says what to build.
type Config struct {
	// Version is the image tag and the org.opencontainers.image.version label.
	Version string
	// Revision is the source commit (org.opencontainers.image.revision).
	Revision string
	// Created stamps every file, the config and the labels.
	Created time.Time
	// Binaries maps a GOARCH (amd64, arm64) to a static linux binary.
	Binaries map[string]string
}

// Names returns the references the layout carries.
func Names(version string) []string {
	return []string{Repository + ":" + version, Repository + ":" + FloatingTag}
}

// Build returns the multi-arch index.
func Build(cfg Config) (v1.ImageIndex, error) {
	if cfg.Version == "" {
		return nil, errors.New("image: no version")
	}
	if len(cfg.Binaries) == 0 {
		return nil, errors.New("image: no binaries")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	arches := make([]string, 0, len(cfg.Binaries))
	for a := range cfg.Binaries {
		arches = append(arches, a)
	}
	slices.Sort(arches)
	for _, arch := range arches {
		img, err := buildOne(cfg, arch, cfg.Binaries[arch])
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: "linux", Architecture: arch},
			},
		})
	}
	return idx, nil
}

func labels(cfg Config) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "teapot-lb agent",
		"org.opencontainers.image.description": "The teapot-lb tenant agent: streams a Kubernetes cluster's LoadBalancer Services and Ingresses to a teapot-lb cluster",
		"org.opencontainers.image.source":      "https://github.com/teapot-lb/teapot-lb",
		"org.opencontainers.image.url":         "https://github.com/teapot-lb/teapot-lb",
		"org.opencontainers.image.version":     cfg.Version,
		"org.opencontainers.image.revision":    cfg.Revision,
		"org.opencontainers.image.created":     cfg.Created.UTC().Format(time.RFC3339),
	}
}

func buildOne(cfg Config, arch, binPath string) (v1.Image, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	data, err := rootfs(bin, cfg.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: cfg.Created}, CreatedBy: "teapot-lb packaging/image", Comment: "static teapot-lb binary"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: cfg.Created}
	cf.Author = "teapot-lb"
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint: []string{Binary, "agent"},
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/bin"},
		Labels:     labels(cfg),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, map[string]string{
		"org.opencontainers.image.version":  cfg.Version,
		"org.opencontainers.image.revision": cfg.Revision,
		"org.opencontainers.image.created":  cfg.Created.UTC().Format(time.RFC3339),
	}).(v1.Image), nil
}

// rootfs is the layer: directories, the binary, and the account files of
// the non-root user. There is no shell and no package manager.
func rootfs(bin []byte, mtime time.Time) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, UID)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", UID)
	entries := []struct {
		name string
		mode int64
		uid  int
		dir  bool
		data []byte
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: UID, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/bin/", mode: 0o755, dir: true},
		{name: filepath.Join("usr/bin", filepath.Base(Binary)), mode: 0o755, data: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid,
			ModTime: mtime, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.data)),
		}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes idx as an OCI image layout into dir (which must not
// exist), named by names for `ctr images import` and registries.
func WriteLayout(dir string, idx v1.ImageIndex, names []string) error {
	p, err := layout.Write(dir, mutate.IndexMediaType(empty.Index, types.OCIImageIndex))
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          n,
			"org.opencontainers.image.ref.name": n,
		})); err != nil {
			return err
		}
	}
	return nil
}
