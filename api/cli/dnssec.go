package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// dnssecRolloverCmd is `teapot-lb cluster dnssec-rollover`: the steps of
// a signed zone's key rollover (RollDNSKey).
func (a *app) dnssecRolloverCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dnssec-rollover",
		Short: "Roll the DNSSEC key of a zone the hosts sign (serve --dns-dnssec)",
		Long: "A rollover is by double signature: start adds a new key to the zone's DNSKEY set\n" +
			"and every answer is signed by both keys, so it validates from the DS of either.\n" +
			"Then put the new key's DS in the parent zone (beside the old one or in its place);\n" +
			"once the parent serves it, the old DS set's TTL has passed and the DNSKEY set with\n" +
			"both keys has been published for its TTL (1 h), finish makes the new key the only\n" +
			"one. cancel drops the new key before then. `teapot-lb explain node ID` shows both DS.",
	}
	step := func(use, short string, st pb.RollDNSKeyRequest_Step) *cobra.Command {
		var force bool
		c := &cobra.Command{
			Use: use + " ZONE", Short: short, Args: args(cobra.ExactArgs(1)),
			RunE: func(cmd *cobra.Command, argv []string) error {
				return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
					resp, err := c.Admin.RollDNSKey(ctx, &pb.RollDNSKeyRequest{Zone: argv[0], Step: st, Force: force})
					if status.Code(err) == codes.Unimplemented {
						return errors.New("the host answering runs a release without DNSSEC key rollover: ask a host of a newer release (--server)")
					}
					if err != nil {
						return err
					}
					if !a.tabular() {
						return manifest.EncodeMessage(cmd.OutOrStdout(), resp, string(a.output))
					}
					writeRollover(cmd.OutOrStdout(), st, resp.GetZone())
					return nil
				})
			},
		}
		if st == pb.RollDNSKeyRequest_STEP_FINISH {
			c.Flags().BoolVar(&force, "force", false, "finish before the DNSKEY set with both keys has been published for its TTL")
		}
		return c
	}
	cmd.AddCommand(
		step("start", "Add a new key that signs beside the current one; show both DS", pb.RollDNSKeyRequest_STEP_START),
		step("finish", "Make the new key the zone's only key", pb.RollDNSKeyRequest_STEP_FINISH),
		step("cancel", "Drop the new key; the current one signs alone", pb.RollDNSKeyRequest_STEP_CANCEL),
	)
	return cmd
}

// writeRollover prints a zone's keys after a rollover step.
func writeRollover(w io.Writer, st pb.RollDNSKeyRequest_Step, z *pb.DNSZoneObservation) {
	switch st {
	case pb.RollDNSKeyRequest_STEP_START:
		fmt.Fprintf(w, "rollover of %s started: keys %d and %d sign every answer\n", z.GetZone(), z.GetKeyTag(), z.GetNextKeyTag())
		fmt.Fprintf(w, "  DS of the current key: %s\n  DS of the new key:     %s\n", z.GetDs(), z.GetNextDs())
		fmt.Fprintf(w, "Put the new DS in the parent zone; finish once the parent serves it, the old DS set's TTL has passed, and not before %s.\n",
			z.GetRolloverFinishAfter().AsTime().UTC().Format(time.RFC3339))
	case pb.RollDNSKeyRequest_STEP_FINISH:
		fmt.Fprintf(w, "rollover of %s finished: key %d signs alone\n  DS: %s\nRemove the old DS from the parent zone if it is still there.\n", z.GetZone(), z.GetKeyTag(), z.GetDs())
	default:
		fmt.Fprintf(w, "rollover of %s cancelled: key %d signs alone\n  DS: %s\nRemove the new DS from the parent zone if you put it there.\n", z.GetZone(), z.GetKeyTag(), z.GetDs())
	}
}
