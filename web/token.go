package web

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/teapot-lb/teapot-lb/api/client"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// tokenCommand returns `teapot-lb dashboard token`: the cluster signs a
// read-only login token for the dashboards the hosts serve (serve
// --web-addr) with its CA key.
func tokenCommand() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Get a read-only login token for the dashboard the hosts serve (serve --web-addr)",
		Long: "token asks the cluster for a dashboard-read token signed by the cluster CA. Every\n" +
			"host serving --web-addr accepts it until it expires: open https://HOST:PORT/login and\n" +
			"paste it, or open https://HOST:PORT/login?token=TOKEN. It reads; it cannot change anything.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl%time.Second != 0 || ttl < time.Minute || ttl > 168*time.Hour {
				return fmt.Errorf("--ttl %v: want whole seconds between 1m and 168h", ttl)
			}
			configPath, _ := cmd.Flags().GetString("config")
			server, _ := cmd.Flags().GetString("server")
			path, err := client.FindConfig(configPath)
			if err != nil {
				return err
			}
			cfg, err := client.LoadConfig(path)
			if err != nil {
				return err
			}
			conn, err := client.Dial(cmd.Context(), cfg, server)
			if err != nil {
				return err
			}
			defer conn.Close()
			resp, err := conn.Admin.CreateDashboardToken(cmd.Context(), &pb.CreateDashboardTokenRequest{TtlSeconds: uint32(ttl / time.Second)})
			if err != nil {
				return fmt.Errorf("dashboard token: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), resp.GetToken())
			fmt.Fprintf(cmd.ErrOrStderr(), "read-only dashboard token %s, valid until %s\n", resp.GetId(), resp.GetExpires().AsTime().UTC().Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token stays valid (1m to 168h)")
	return cmd
}
