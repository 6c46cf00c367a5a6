package manifest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/catalogtest"
)

// Every file of examples/ decodes, and each object passes validation
// against the pools and tenants of the same file.
func TestExamplesValidate(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) < 8 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			fh, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			objs, err := Decode(fh, f)
			if err != nil {
				t.Fatal(err)
			}
			c := catalogtest.New()
			for _, o := range objs {
				if o.GetVipPool() != nil {
					c.Put(o.GetVipPool())
				}
				if o.GetTenant() != nil {
					c.Put(o.GetTenant())
				}
			}
			for _, o := range objs {
				switch {
				case o.GetVipPool() != nil:
					err = api.ValidatePool(o.GetVipPool(), c)
				case o.GetTenant() != nil:
					err = api.ValidateTenant(o.GetTenant(), c)
				case o.GetLoadBalancer() != nil:
					err = api.ValidateLoadBalancer(o.GetLoadBalancer(), c)
					c.Put(o.GetLoadBalancer())
				}
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// The examples' tenants may all be applied to one cluster (the
// configuration workflow lab applies the directory): no two of them have
// overlapping networks, which a write refuses.
func TestExamplesTenantNetworksApart(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := catalogtest.New()
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Decode(fh, f)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetTenant() != nil {
				c.Put(o.GetTenant())
			}
		}
	}
	if got := api.NetworkOverlaps(c); len(got) > 0 {
		t.Fatalf("the examples' tenants overlap: %q", got)
	}
}
