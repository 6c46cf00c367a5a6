// Package backup reads and writes backup files: an encoded pb.Backup (the
// replicated state and the cluster CA), optionally sealed with a
// passphrase (scrypt and AES-256-GCM). A backup holds every private key of
// the cluster, so files are written 0600.
package backup

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/crypto/scrypt"
	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// The first line of a backup file says how the rest is encoded.
var (
	headerPlain  = []byte("teapot-lb backup v1\n")
	headerSealed = []byte("teapot-lb backup v1 scrypt-aes256gcm\n")
)

// scrypt parameters (N=2^15, r=8, p=1: about 100 ms and 32 MiB).
const (
	defaultScryptN = 1 << 15
	scryptR        = 8
	scryptP        = 1
	saltLen        = 16
	keyLen         = 32
	maxBytes       = 1 << 30 // a backup larger than this is refused when read
)

// scryptN is the scrypt cost, defaultScryptN but in this package's tests,
// which lower it (a sealed file is read at the cost it was sealed with)
// and seal and open once at the default.
var scryptN = defaultScryptN

// ErrPassphrase: the file is sealed and the passphrase is missing or wrong.
var ErrPassphrase = errors.New("backup is encrypted: wrong or missing passphrase")

// Encode returns the file contents of b, sealed when passphrase is not
// empty.
func Encode(b *pb.Backup, passphrase []byte) ([]byte, error) {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode backup: %w", err)
	}
	return encodeRaw(data, passphrase)
}

// EncodeRaw is Encode for an already encoded pb.Backup (what the admin API
// streams); it checks that data is one.
func EncodeRaw(data, passphrase []byte) ([]byte, error) {
	var b pb.Backup
	if err := proto.Unmarshal(data, &b); err != nil || b.GetState() == nil || len(b.GetCaKeyPem()) == 0 {
		return nil, fmt.Errorf("the server sent something that is not a backup (%v)", err)
	}
	return encodeRaw(data, passphrase)
}

func encodeRaw(data, passphrase []byte) ([]byte, error) {
	if len(passphrase) == 0 {
		return append(append([]byte{}, headerPlain...), data...), nil
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	aead, err := sealer(passphrase, salt)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append(append(append([]byte{}, headerSealed...), salt...), nonce...)
	return aead.Seal(out, nonce, data, headerSealed), nil
}

func sealer(passphrase, salt []byte) (cipher.AEAD, error) {
	key, err := scrypt.Key(passphrase, salt, scryptN, scryptR, scryptP, keyLen)
	if err != nil {
		return nil, fmt.Errorf("derive key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Decode reads file contents written by Encode.
func Decode(file, passphrase []byte) (*pb.Backup, error) {
	var data []byte
	switch {
	case bytes.HasPrefix(file, headerSealed):
		if len(passphrase) == 0 {
			return nil, ErrPassphrase
		}
		rest := file[len(headerSealed):]
		if len(rest) < saltLen+12 {
			return nil, errors.New("backup is truncated")
		}
		aead, err := sealer(passphrase, rest[:saltLen])
		if err != nil {
			return nil, err
		}
		nonce := rest[saltLen : saltLen+aead.NonceSize()]
		data, err = aead.Open(nil, nonce, rest[saltLen+aead.NonceSize():], headerSealed)
		if err != nil {
			return nil, fmt.Errorf("%w (or the file is damaged)", ErrPassphrase)
		}
	case bytes.HasPrefix(file, headerPlain):
		data = file[len(headerPlain):]
	default:
		return nil, errors.New("not a teapot-lb backup (it does not start with \"teapot-lb backup v1\")")
	}
	var b pb.Backup
	if err := proto.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("backup is damaged: %w", err)
	}
	if b.GetState() == nil || len(b.GetCaCertPem()) == 0 || len(b.GetCaKeyPem()) == 0 || b.GetClusterId() == "" {
		return nil, errors.New("backup is incomplete: it needs the state, the cluster id and the CA")
	}
	return &b, nil
}

// WriteFile writes contents to path with mode 0600, replacing any file
// there only once the new one is complete.
func WriteFile(path string, contents []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write backup: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write backup: %w", err)
	}
	if _, err := tmp.Write(contents); err != nil {
		tmp.Close()
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write backup: %w", err)
	}
	return nil
}

// ReadFile reads and decodes a backup file.
func ReadFile(path string, passphrase []byte) (*pb.Backup, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read backup: %w", err)
	}
	if fi.Size() > maxBytes {
		return nil, fmt.Errorf("backup %s is %d bytes, more than the %d a backup can be", path, fi.Size(), maxBytes)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read backup: %w", err)
	}
	b, err := Decode(file, passphrase)
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", path, err)
	}
	return b, nil
}

// ReadPassphrase reads a passphrase file: its first line, without the line
// end. An empty passphrase is refused.
func ReadPassphrase(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read passphrase: %w", err)
	}
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	}
	data = bytes.TrimSuffix(data, []byte("\r"))
	if len(data) == 0 {
		return nil, fmt.Errorf("passphrase file %s is empty", path)
	}
	return data, nil
}

// ReadRestore reads the backup of serve's --restore (path) with the
// passphrase in --restore-passphrase-file (passFile): nil when no restore
// is asked for, and errors that name the flag to fix.
func ReadRestore(path, passFile string) (*pb.Backup, error) {
	if path == "" {
		if passFile != "" {
			return nil, errors.New("--restore-passphrase-file needs --restore")
		}
		return nil, nil
	}
	var pass []byte
	if passFile != "" {
		var err error
		if pass, err = ReadPassphrase(passFile); err != nil {
			return nil, fmt.Errorf("--restore-passphrase-file: %w", err)
		}
	}
	b, err := ReadFile(path, pass)
	if errors.Is(err, ErrPassphrase) && pass == nil {
		return nil, fmt.Errorf("--restore: %w: give it with --restore-passphrase-file", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--restore: %w", err)
	}
	return b, nil
}
