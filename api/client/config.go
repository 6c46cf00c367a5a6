package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// Values of the apiVersion and kind fields of an admin config file.
const (
	ConfigAPIVersion = "teapot-lb/v1"
	ConfigKind       = "AdminConfig"
)

// Where FindConfig looks for the admin config.
const (
	// EnvConfig names the environment variable holding a config path.
	EnvConfig = "TEAPOT_LB_CONFIG"
	// ConfigFileName is the file name `teapot-lb serve` writes into its
	// data directory.
	ConfigFileName = "admin.conf"
	// DataDirConfig is the config of a server started in the current
	// directory with default flags.
	DataDirConfig = "teapot-data/" + ConfigFileName
	// SystemConfig is the config of a host installed from the deb or rpm
	// package: its data directory is /var/lib/teapot-lb, readable by root.
	SystemConfig = "/var/lib/teapot-lb/" + ConfigFileName
)

// ErrNoConfig is returned by FindConfig when no admin config exists.
var ErrNoConfig = errors.New("no admin config found")

// Config holds what an admin client needs to reach the cluster: server
// addresses and its credentials, all PEM.
type Config struct {
	// Servers are API addresses (host:port) of LB hosts.
	Servers []string `json:"servers"`
	// CA is the cluster CA certificate.
	CA string `json:"ca"`
	// Cert and Key are the admin's certificate and private key.
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// configFile is Config as written on disk.
type configFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Config
}

// LoadConfig reads and checks an admin config file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read admin config: %w", err)
	}
	var f configFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("admin config %s: %s", path, yamlError(err))
	}
	if f.Kind != ConfigKind {
		return nil, fmt.Errorf("admin config %s: kind is %q, want %s", path, f.Kind, ConfigKind)
	}
	if f.APIVersion != ConfigAPIVersion {
		return nil, fmt.Errorf("admin config %s: apiVersion is %q, want %s", path, f.APIVersion, ConfigAPIVersion)
	}
	cfg := f.Config
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("admin config %s: %w", path, err)
	}
	return &cfg, nil
}

func (c *Config) check() error {
	switch {
	case len(c.Servers) == 0:
		return errors.New("servers: no server address listed")
	case strings.TrimSpace(c.CA) == "":
		return errors.New("ca: missing cluster CA certificate")
	case strings.TrimSpace(c.Cert) == "" || strings.TrimSpace(c.Key) == "":
		return errors.New("cert, key: missing admin certificate or key")
	}
	return nil
}

// SaveConfig writes cfg to path atomically with mode 0600, creating the
// parent directory (mode 0700) if needed.
func SaveConfig(path string, cfg *Config) error {
	servers := cfg.Servers
	if servers == nil {
		servers = []string{}
	}
	data, err := yamlv2.Marshal(yamlv2.MapSlice{
		{Key: "apiVersion", Value: ConfigAPIVersion},
		{Key: "kind", Value: ConfigKind},
		{Key: "servers", Value: servers},
		{Key: "ca", Value: cfg.CA},
		{Key: "cert", Value: cfg.Cert},
		{Key: "key", Value: cfg.Key},
	})
	if err != nil {
		return fmt.Errorf("encode admin config: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create config directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write admin config: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write admin config: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write admin config: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write admin config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write admin config: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write admin config: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable where the platform allows
		d.Close()
	}
	return nil
}

// FindConfig returns the path of the admin config to use: flagPath if set,
// else $TEAPOT_LB_CONFIG, else ./teapot-data/admin.conf, else
// ~/.config/teapot-lb/admin.conf ($XDG_CONFIG_HOME is honoured).
func FindConfig(flagPath string) (string, error) {
	if flagPath != "" {
		return explicit(flagPath, "--config")
	}
	if p := os.Getenv(EnvConfig); p != "" {
		return explicit(p, "$"+EnvConfig)
	}
	looked := []string{"$" + EnvConfig + " (unset)"}
	candidates := []string{filepath.FromSlash("./" + DataDirConfig)}
	if p := userConfigPath(); p != "" {
		candidates = append(candidates, p)
	}
	candidates = append(candidates, SystemConfig)
	for _, p := range candidates {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		looked = append(looked, p)
	}
	return "", fmt.Errorf("%w (looked in %s): start `teapot-lb serve` or pass --config", ErrNoConfig, strings.Join(looked, ", "))
}

func userConfigPath() string {
	base := os.Getenv("XDG_CONFIG_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".config")
	}
	return filepath.Join(base, "teapot-lb", ConfigFileName)
}

func explicit(path, source string) (string, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: %s names %s, which does not exist: start `teapot-lb serve` or pass --config", ErrNoConfig, source, path)
		}
		return "", fmt.Errorf("admin config %s (from %s): %w", path, source, err)
	}
	return path, nil
}

// yamlError drops the layers sigs.k8s.io/yaml puts around a decoding error.
func yamlError(err error) string {
	msg := oneLine(err.Error())
	for _, p := range []string{"error converting YAML to JSON: ", "error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return strings.Replace(msg, "Go struct field configFile.Config.", "field ", 1)
}

func oneLine(s string) string {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	return strings.Join(fields, " ")
}
