package agent

import (
	"log/slog"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
)

// TestFeatureLevelOptions: the LB cluster's feature level decides which
// model fields the translation may use: notFound routes (a Gateway's
// listener isolation) and TLS listeners in Terminate mode from level 5,
// dual-stack VIPs from level 4.
func TestFeatureLevelOptions(t *testing.T) {
	t.Parallel()
	a := &Agent{set: newDesiredSet(), log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		level                                   uint32
		dualStack, notFoundRoutes, tlsTerminate bool
	}{
		{4, true, false, false},
		{api.LevelOf(api.FeatureNotFoundRoutes), true, true, true},
		{api.LevelOf(api.FeatureTLSTerminate), true, true, true},
		{3, false, false, false},
	} {
		a.setFeatureLevel(tc.level)
		if o := a.opts(); o.DualStack != tc.dualStack || o.NotFoundRoutes != tc.notFoundRoutes || o.TLSTerminate != tc.tlsTerminate {
			t.Errorf("level %d: dualStack %v notFoundRoutes %v tlsTerminate %v, want %v %v %v", tc.level, o.DualStack, o.NotFoundRoutes, o.TLSTerminate, tc.dualStack, tc.notFoundRoutes, tc.tlsTerminate)
		}
	}
}
