package promtext

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestTextLines(t *testing.T) {
	var b strings.Builder
	w := NewText(&b)
	w.Family("x_total", "a \\ help\nline", "counter", 2)
	w.Sample("x_total", "", []string{"a", "b"}, []string{`q"uo\te`, "line\nfeed"}, "le", "+Inf", 3)
	w.Sample("x_total", "_sum", nil, nil, "", "", 0.25)
	w.Family("empty", "never written", "gauge", 0)
	w.Sample("y", "", nil, nil, "", "", math.NaN())
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "# HELP x_total a \\\\ help\\nline\n# TYPE x_total counter\n" +
		`x_total{a="q\"uo\\te",b="line\nfeed",le="+Inf"} 3` + "\n" +
		"x_total_sum 0.25\ny NaN\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

type failing struct{ n int }

func (f *failing) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("gone")
}

func TestTextStopsAtTheFirstError(t *testing.T) {
	f := &failing{}
	w := NewText(f)
	for range 10000 {
		w.Sample("x", "", nil, nil, "", "", 1)
	}
	if err := w.Flush(); err == nil || f.n != 1 {
		t.Errorf("Flush %v after %d writes to a writer that fails; want its error after one", err, f.n)
	}
}
