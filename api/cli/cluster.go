package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func (a *app) clusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Inspect the LB hosts and add or remove them",
		Args:  args(cobra.NoArgs),
	}
	cmd.AddCommand(a.clusterStatusCmd(), a.joinTokenCmd(), a.removeNodeCmd(), a.drainNodeCmd(), a.backupCmd(), a.recoverCmd(), a.dnssecRolloverCmd())
	return cmd
}

func (a *app) clusterStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the Raft state of every LB host",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				st, err := c.Admin.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
				if err != nil {
					return err
				}
				if !a.tabular() {
					return manifest.EncodeMessage(cmd.OutOrStdout(), st, string(a.output))
				}
				return writeStatus(cmd, st, a.now())
			})
		},
	}
}

func writeStatus(cmd *cobra.Command, st *pb.ClusterStatusResponse, now time.Time) error {
	w := cmd.OutOrStdout()
	leader := st.GetLeaderId()
	if leader == "" {
		leader = "none"
	}
	fmt.Fprintf(w, "cluster %s: leader %s, term %d, commit index %d, revision %d, feature level %s, heartbeat timeout %s, election timeout %s\n\n",
		orDash(st.GetClusterId()), leader, st.GetTerm(), st.GetCommitIndex(), st.GetRevision(), level(st.GetFeatureLevel()),
		orDash(st.GetHeartbeatTimeout()), orDash(st.GetElectionTimeout()))
	if ps := st.GetProblems(); len(ps) > 0 {
		fmt.Fprintln(w, "Problems of the stored state:")
		for _, p := range ps {
			fmt.Fprintf(w, "  %s\n", p)
		}
		fmt.Fprintln(w)
	}
	t := newTable(w)
	t.row("ID", "STATE", "HEALTHY", "DRAINING", "SUFFRAGE", "RAFT ADDR", "API ADDR", "APPLIED", "TERM", "LAST CONTACT", "VERSION", "LEVEL", "DATA PATH")
	var failing [][]string
	for _, n := range st.GetNodes() {
		healthy := "no"
		if n.GetHealthy() {
			healthy = "yes"
		}
		t.row(n.GetId(), n.GetState(), healthy, yesNo(n.GetDraining()), n.GetSuffrage(), n.GetRaftAddr(), n.GetApiAddr(),
			strconv.FormatUint(n.GetAppliedIndex(), 10), strconv.FormatUint(n.GetTerm(), 10), n.GetLastContact(),
			orDash(n.GetVersion()), level(n.GetFeatureLevel()), orDash(n.GetDataPath()))
		if n.GetError() != "" {
			failing = append(failing, []string{n.GetId(), n.GetError()})
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(failing) > 0 {
		fmt.Fprintln(w)
		t := newTable(w)
		t.row("NODE", "ERROR")
		for _, f := range failing {
			t.row(f...)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return writeVIPs(w, st, now)
}

// writeVIPs lists which host holds or announces each VIP, since when and
// why, and the failure detector's settings.
func writeVIPs(w io.Writer, st *pb.ClusterStatusResponse, now time.Time) error {
	var rows [][]string
	detector := ""
	for _, n := range st.GetNodes() {
		if detector == "" && n.GetHeartbeatInterval() != "" {
			detector = fmt.Sprintf("VIP failure detector: heartbeat every %s, a host is down after %d missed heartbeats",
				n.GetHeartbeatInterval(), n.GetHeartbeatMisses())
		}
		for _, v := range n.GetVips() {
			rows = append(rows, []string{v.GetAddress(), v.GetMode(), n.GetId(), v.GetState(), age(now, v.GetSince()),
				orDash(strings.Join(v.GetLoadBalancers(), ",")), orDash(v.GetReason())})
		}
	}
	if detector == "" && len(rows) == 0 {
		return nil
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i][0] < rows[j][0] })
	fmt.Fprintln(w)
	if detector != "" {
		fmt.Fprintln(w, detector)
	}
	if len(rows) == 0 {
		return nil
	}
	t := newTable(w)
	t.row("VIP", "MODE", "HOST", "STATE", "SINCE", "LOAD BALANCERS", "REASON")
	for _, r := range rows {
		t.row(r...)
	}
	return t.flush()
}

func (a *app) joinTokenCmd() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "join-token",
		Short: "Create a token that lets a new LB host join the cluster",
		Long: "join-token prints a token for `teapot-lb serve --join`. The token alone goes to\n" +
			"standard output, so that scripts can capture it; the command to run goes to\n" +
			"standard error.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case ttl < time.Second:
				return fmt.Errorf("--ttl: want at least 1s, got %s", ttl)
			case ttl.Seconds() > math.MaxUint32:
				return fmt.Errorf("--ttl: want at most %s, got %s", time.Duration(math.MaxUint32)*time.Second, ttl)
			}
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				resp, err := c.Admin.CreateJoinToken(ctx, &pb.CreateJoinTokenRequest{TtlSeconds: uint32(ttl / time.Second)})
				if err != nil {
					return err
				}
				if !a.tabular() {
					return manifest.EncodeMessage(cmd.OutOrStdout(), resp, string(a.output))
				}
				fmt.Fprintln(cmd.OutOrStdout(), resp.GetToken())
				servers := resp.GetServers()
				if len(servers) == 0 {
					servers = c.Servers
				}
				expires := ""
				if resp.GetExpires() != nil {
					expires = " (valid until " + resp.GetExpires().AsTime().UTC().Format(time.RFC3339) + ")"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "On the new host, run%s:\n  teapot-lb serve --join %s --token %s\n",
					expires, servers[0], resp.GetToken())
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token stays valid")
	return cmd
}

func (a *app) removeNodeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "remove NODE",
		Short: "Remove an LB host from the cluster",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				if _, err := c.Admin.RemoveNode(ctx, &pb.RemoveNodeRequest{Id: argv[0]}); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "node/%s removed\n", argv[0])
				return nil
			})
		},
		ValidArgsFunction: a.completeNamesOf("Node"),
	}
}

func (a *app) drainNodeCmd() *cobra.Command {
	var undo bool
	cmd := &cobra.Command{
		Use:   "drain NODE",
		Short: "Make an LB host hand its clients over and give up its VIPs (release arp, withdraw bgp)",
		Long: "drain moves a host's VIPs to the other hosts without stopping it, e.g. before\n" +
			"maintenance. A holder of arp VIPs first hands its clients over: HTTP connections\n" +
			"close after their next response, HTTP/2 clients get a GOAWAY, and TCP, TLS\n" +
			"passthrough and WebSocket connections run until they end or the host's\n" +
			"--drain-timeout passes. --undo lets it take VIPs again.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				if _, err := c.Admin.DrainNode(ctx, &pb.DrainNodeRequest{Id: argv[0], Undo: undo}); err != nil {
					return err
				}
				what := "draining"
				if undo {
					what = "no longer draining"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "node/%s %s\n", argv[0], what)
				return nil
			})
		},
		ValidArgsFunction: a.completeNamesOf("Node"),
	}
	cmd.Flags().BoolVar(&undo, "undo", false, "let the host take VIPs again")
	return cmd
}

func (a *app) recoverCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Make the host answering a one-host cluster after the other voters are gone for good",
		Long: "recover turns the host given by --server into a one-host cluster with the state it\n" +
			"holds, without stopping it: its data plane keeps serving. Use it only when a majority\n" +
			"of the voters is lost for good (hardware dead, disks lost); it refuses while any other\n" +
			"voter answers. Then join new hosts to it. Needs --yes.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !yes {
				return errors.New("recover forgets every other voter of the cluster: give --yes once they are gone for good")
			}
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				resp, err := c.Admin.Recover(ctx, &pb.RecoverRequest{})
				if status.Code(err) == codes.Unimplemented {
					return errors.New("the host answering runs a release that cannot recover in place: stop it and start it once with serve --recover")
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "recovered: a one-host cluster at revision %d; forgot %s\n", resp.GetRevision(), strings.Join(resp.GetForgotten(), ", "))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm that the other voters are gone for good")
	return cmd
}

// level shows a feature level; 0 is "-" (not reported).
func level(l uint32) string {
	if l == 0 {
		return "-"
	}
	return strconv.FormatUint(uint64(l), 10)
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
