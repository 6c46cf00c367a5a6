package manifest_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/manifest"
)

// FuzzDecode checks that Decode never panics, that its errors are single
// lines wrapping ErrInvalid, and that whatever it accepts survives a trip
// through Encode and Decode again, in both formats.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"shop.yaml", "spellings.yaml", "list.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, tt := range decodeErrors {
		f.Add([]byte(tt.text))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := manifest.Decode(bytes.NewReader(data), "fuzz.yaml")
		if err != nil {
			if !errors.Is(err, manifest.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		for _, format := range []string{manifest.FormatYAML, manifest.FormatJSON} {
			var buf bytes.Buffer
			if err := manifest.EncodeList(&buf, objs, format); err != nil {
				t.Fatalf("encode %s: %v", format, err)
			}
			again, err := manifest.Decode(bytes.NewReader(buf.Bytes()), "again")
			if err != nil {
				t.Fatalf("%s output does not decode: %v\n%s", format, err, buf.Bytes())
			}
			assertEqual(t, again, objs)
		}
	})
}
