package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// watchEvery is how often `events --watch` asks for new events.
const watchEvery = time.Second

func (a *app) eventsCmd() *cobra.Command {
	var req pb.EventsRequest
	var watch bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List the recent events of every LB host (VIP moves, bind failures, member health, certificates, leader changes)",
		Long: "List the recent events of every LB host (VIP moves, bind failures, member health, certificates, leader changes).\n\n" +
			"-o json prints one JSON array of events, as get -o json prints objects; with --watch, events are printed as they\n" +
			"happen, -o json as one JSON object per line (newline-delimited JSON) and -o yaml as documents separated by ---.",
		Example: "  teapot-lb events --lb acme/shop\n" +
			"  teapot-lb events --node n2 --watch\n" +
			"  teapot-lb events -o json --watch | jq -r .message",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.LoadBalancer != "" {
				t, n, ok := strings.Cut(req.LoadBalancer, "/")
				if !ok && req.Tenant != "" {
					req.LoadBalancer, t, n, ok = req.Tenant+"/"+req.LoadBalancer, req.Tenant, req.LoadBalancer, true
				}
				if !ok || t == "" || n == "" {
					return fmt.Errorf("--lb %q: use TENANT/NAME (or --tenant T --lb NAME)", req.LoadBalancer)
				}
			}
			return a.connect(cmd, func(c *client.Conn) error {
				return a.events(cmd, c, &req, watch)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Tenant, "tenant", "", "only events of this tenant")
	f.StringVar(&req.LoadBalancer, "lb", "", "only events of this load balancer (TENANT/NAME)")
	f.StringVar(&req.Node, "node", "", "only events of this LB host")
	f.BoolVarP(&watch, "watch", "w", false, "keep printing new events as they happen (-o json: one object per line)")
	return cmd
}

func (a *app) events(cmd *cobra.Command, c *client.Conn, req *pb.EventsRequest, watch bool) error {
	w := cmd.OutOrStdout()
	header := true
	warned := map[string]bool{}
	for {
		ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
		resp, err := c.Admin.Events(ctx, req)
		cancel()
		if err != nil {
			if watch && cmd.Context().Err() != nil {
				return nil
			}
			return err
		}
		for _, u := range resp.GetUnreachable() {
			if !warned[u] {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: host %s: its events are missing\n", u)
				warned[u] = true
			}
		}
		if !a.tabular() {
			if err := encodeEvents(w, resp.GetEvents(), string(a.output), watch, header); err != nil {
				return err
			}
			header = header && len(resp.GetEvents()) == 0
		} else {
			if header && !watch && len(resp.GetEvents()) == 0 {
				fmt.Fprintln(w, "No events.")
			}
			writeEvents(w, resp.GetEvents(), header)
			header = header && len(resp.GetEvents()) == 0
		}
		if !watch {
			return nil
		}
		req.After = resp.GetCursor()
		select {
		case <-cmd.Context().Done():
			return nil
		case <-time.After(watchEvery):
		}
	}
}

// encodeEvents writes events as -o asks. Without --watch: one JSON array
// (as `get -o json` writes), or YAML documents. With --watch, events are
// written as they come: JSON as one object per line (newline-delimited
// JSON), YAML as documents separated by "---"; first says whether any
// was written before.
func encodeEvents(w io.Writer, evs []*pb.Event, format string, watch, first bool) error {
	if !watch {
		ms := make([]proto.Message, len(evs))
		for i, ev := range evs {
			ms[i] = ev
		}
		return manifest.EncodeMessageList(w, ms, format)
	}
	for _, ev := range evs {
		var err error
		switch format {
		case manifest.FormatJSON:
			err = manifest.EncodeMessageLine(w, ev)
		default:
			if !first {
				if _, err := io.WriteString(w, "---\n"); err != nil {
					return err
				}
			}
			err = manifest.EncodeMessage(w, ev, format)
		}
		if err != nil {
			return err
		}
		first = false
	}
	return nil
}

// writeEvents writes events as a table, one line each.
func writeEvents(w io.Writer, evs []*pb.Event, header bool) {
	if len(evs) == 0 {
		return
	}
	t := newTable(w)
	if header {
		t.row("TIME", "NODE", "TYPE", "SEVERITY", "TENANT", "LB", "MESSAGE")
	}
	for _, ev := range evs {
		// A certificate event is the tenant's, for a name, not one load
		// balancer's: its LB column is "-" (--lb selects it by the name).
		t.row(ev.GetTime().AsTime().UTC().Format(time.RFC3339), ev.GetNodeId(), ev.GetType(), ev.GetSeverity(),
			orDash(ev.GetTenant()), orDash(ev.GetLoadBalancer()), ev.GetMessage())
	}
	_ = t.flush()
}
