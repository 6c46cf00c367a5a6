package scenarios

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// checkTenantPages opens the tenant page (DNS names, BGP sessions,
// prefixes) and every host's page (its DNS zones) of the live lab, and
// fails on any script error the page throws meanwhile.
func checkTenantPages(t *testing.T, l *vipLab, b *browser, base string) {
	t.Helper()
	var mu sync.Mutex
	var errs []string
	if err := chromedp.Listen(b.ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			errs = append(errs, e.ExceptionDetails.Text+" "+fmt.Sprint(e.ExceptionDetails.Exception.Description))
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				errs = append(errs, "console.error")
			}
		}
	}); err != nil {
		t.Fatalf("listen to the page: %v", err)
	}
	b.do(chromedp.Navigate(base + "/#/tenant/acme"))
	b.waitText("#main", "acme's page with its DNS names and BGP sessions", func(s string) error {
		for _, want := range []string{"Tenant acme", "DNS names", "BGP sessions", "Prefixes from the tenant's speakers"} {
			if !strings.Contains(s, want) {
				return fmt.Errorf("no %q", want)
			}
		}
		if strings.Contains(s, "Asking the hosts") || strings.Contains(s, "not read:") {
			return fmt.Errorf("the DNS or route table not read yet")
		}
		return nil
	})
	for _, h := range l.lbs {
		b.do(chromedp.Navigate(base + "/#/host/" + h.id))
		b.waitText("#main", h.id+"'s page with its DNS zones", func(s string) error {
			if !strings.Contains(s, "Host "+h.id) || !strings.Contains(s, "DNS zones") {
				return fmt.Errorf("no DNS zones section")
			}
			return nil
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("script errors on the tenant and host pages: %q", errs)
	}
}
