package cli

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// quotaFlag is one --max-* flag of tenant create and update.
type quotaFlag struct {
	flag, help string
	// def is the default in words, for a quota whose default is not a
	// number every host shares (api.DefaultQuotas leaves it 0).
	def   string
	field func(*pb.Quotas) *uint32
	n     int
}

// quotaFlags are the --max-* flags; their defaults come from
// api.DefaultQuotas.
type quotaFlags []*quotaFlag

func newQuotaFlags() quotaFlags {
	return quotaFlags{
		{flag: "max-lbs", help: "most load balancers the tenant may have", field: func(q *pb.Quotas) *uint32 { return &q.LoadBalancers }},
		{flag: "max-addresses", help: "most VIP addresses the tenant may hold", field: func(q *pb.Quotas) *uint32 { return &q.Addresses }},
		{flag: "max-certificates", help: "most certificates the tenant may have", field: func(q *pb.Quotas) *uint32 { return &q.Certificates }},
		{flag: "max-listeners-per-lb", help: "most listeners of one load balancer", field: func(q *pb.Quotas) *uint32 { return &q.ListenersPerLb }},
		{flag: "max-routes-per-lb", help: "most routes of one load balancer", field: func(q *pb.Quotas) *uint32 { return &q.RoutesPerLb }},
		{flag: "max-pools-per-lb", help: "most backend pools of one load balancer", field: func(q *pb.Quotas) *uint32 { return &q.PoolsPerLb }},
		{flag: "max-members-per-pool", help: "most members of one backend pool", field: func(q *pb.Quotas) *uint32 { return &q.MembersPerPool }},
		{flag: "max-listeners", help: "most listeners over all the tenant's load balancers", field: func(q *pb.Quotas) *uint32 { return &q.Listeners }},
		{flag: "max-routes", help: "most routes over all the tenant's load balancers", field: func(q *pb.Quotas) *uint32 { return &q.Routes }},
		{flag: "max-members", help: "most members over all the tenant's load balancers", field: func(q *pb.Quotas) *uint32 { return &q.Members }},
		{flag: "max-health-checks", help: "most health-checked members over all the tenant's load balancers", field: func(q *pb.Quotas) *uint32 { return &q.HealthChecks }},
		{flag: "max-regex-matches-per-lb", help: "most regular expressions (regex path, header, query and gRPC matches) of one load balancer", field: func(q *pb.Quotas) *uint32 { return &q.RegexMatchesPerLb }},
		{flag: "max-regex-matches", help: "most regular expressions over all the tenant's load balancers", field: func(q *pb.Quotas) *uint32 { return &q.RegexMatches }},
		{flag: "regex-cpu-millicores", help: "CPU each LB host may spend matching the tenant's regular expressions, in thousandths of a core", field: func(q *pb.Quotas) *uint32 { return &q.RegexCpuMillicores }},
		{flag: "waf-cpu-millicores", help: "CPU each LB host may spend inspecting the tenant's requests with the WAF, in thousandths of a core", field: func(q *pb.Quotas) *uint32 { return &q.WafCpuMillicores }},
		{flag: "cpu-millicores", help: "CPU each LB host may spend on everything the tenant makes it compute, in thousandths of a core", def: "each host's serve --cpu-per-tenant, by default a quarter of its CPUs", field: func(q *pb.Quotas) *uint32 { return &q.CpuMillicores }},
		{flag: "max-rate-limit-keys", help: "most client keys each LB host tracks for the tenant's rate limits at once (about 100 bytes each)", field: func(q *pb.Quotas) *uint32 { return &q.RateLimitKeys }},
	}
}

func (qf quotaFlags) register(f *pflag.FlagSet) {
	d := api.DefaultQuotas()
	for _, l := range qf {
		def := l.def
		if def == "" {
			def = fmt.Sprint(*l.field(d))
		}
		f.IntVar(&l.n, l.flag, 0, fmt.Sprintf("%s (0: the default, %s)", l.help, def))
	}
}

// set writes the flags given on the command line into q.
func (qf quotaFlags) set(cmd *cobra.Command, q *pb.Quotas) error {
	for _, l := range qf {
		if !cmd.Flags().Changed(l.flag) {
			continue
		}
		if l.n < 0 || l.n > math.MaxUint32 {
			return fmt.Errorf("--%s: want a number from 0 (the default) to %d, got %d", l.flag, uint32(math.MaxUint32), l.n)
		}
		*l.field(q) = uint32(l.n)
	}
	return nil
}

// listEdit is the --X (replace), --add-X and --remove-X flags of one list.
type listEdit struct {
	field, what      string
	set, add, remove []string
}

func (e *listEdit) register(f *pflag.FlagSet, plural, singular, help string) {
	f.StringSliceVar(&e.set, plural, nil, "replace the "+help+" (comma-separated; \"\" for none)")
	f.StringSliceVar(&e.add, "add-"+singular, nil, "add to the "+help+" (repeatable)")
	f.StringSliceVar(&e.remove, "remove-"+singular, nil, "remove from the "+help+" (repeatable)")
	e.field = plural
}

// apply edits list as the flags ask.
func (e *listEdit) apply(cmd *cobra.Command, tenant string, list []string) ([]string, bool, error) {
	changed := false
	if cmd.Flags().Changed(e.field) {
		list, changed = slices.Clone(e.set), true
	}
	for _, v := range e.add {
		changed = true
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	for _, v := range e.remove {
		i := slices.Index(list, v)
		if i < 0 {
			return nil, false, fmt.Errorf("--remove-%s: tenant %s has no %s %q (its %s: %s)", e.what, tenant, e.what, v, e.field, listOrNone(list))
		}
		list, changed = slices.Delete(list, i, i+1), true
	}
	return list, changed, nil
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return fmt.Sprint(l)
}

func (a *app) tenantUpdateCmd() *cobra.Command {
	var (
		domains      = &listEdit{what: "domain"}
		networks     = &listEdit{what: "network"}
		pools        = &listEdit{what: "pool"}
		podsRoutable bool
		dryRun       bool
	)
	quotas := newQuotaFlags()
	cmd := &cobra.Command{
		Use:   "update NAME",
		Short: "Change a tenant's domains, networks, pools or quotas",
		Long: "Update reads the tenant, changes what the flags say and writes it back with the same\n" +
			"validation as apply: a change that would break one of the tenant's load balancers is\n" +
			"refused and nothing is written. A --max-* flag of 0 returns that quota to its default.\n" +
			"If the tenant changed between the read and the write, nothing is written: run it again.",
		Example: "  teapot-lb tenant update acme --add-domain acme.example.org --max-lbs 50\n" +
			"  teapot-lb tenant update acme --pools public,private\n" +
			"  teapot-lb tenant update acme --remove-network 10.30.0.0/16 --dry-run",
		Args:              args(cobra.ExactArgs(1)),
		ValidArgsFunction: a.completeNamesOf(api.KindTenant),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ref := &pb.ObjectRef{Kind: api.KindTenant, Name: argv[0]}
			var t *pb.Tenant
			err := a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				o, err := c.Admin.Get(ctx, &pb.GetRequest{Ref: ref})
				t = o.GetTenant()
				return err
			})
			if err != nil {
				return err
			}
			// The write is made only if nobody changed the tenant meanwhile.
			read := &pb.RevisionPrecondition{Ref: ref, Revision: t.GetMeta().GetRevision()}
			t.Meta, t.Uid, t.RevokedCredentials = nil, "", nil
			changed := false
			for _, e := range []struct {
				edit *listEdit
				list *[]string
			}{{domains, &t.Domains}, {networks, &t.Networks}, {pools, &t.Pools}} {
				l, edited, err := e.edit.apply(cmd, t.GetName(), *e.list)
				if err != nil {
					return err
				}
				if edited {
					*e.list, changed = l, true
				}
			}
			if cmd.Flags().Changed("pods-routable") {
				t.PodsRoutable, changed = podsRoutable, true
			}
			q := proto.Clone(t.GetQuotas()).(*pb.Quotas)
			if q == nil {
				q = &pb.Quotas{}
			}
			if err := quotas.set(cmd, q); err != nil {
				return err
			}
			if !proto.Equal(q, orEmptyQuotas(t.GetQuotas())) {
				changed = true
			}
			t.Quotas = q
			if proto.Equal(q, &pb.Quotas{}) {
				t.Quotas = nil
			}
			if !changed {
				return fmt.Errorf("nothing to change: give --domains, --networks, --pools (or --add-*/--remove-*), --pods-routable or a quota such as --max-lbs or --cpu-millicores; see '%s --help'", cmd.CommandPath())
			}
			err = a.applyObjects(cmd, []*pb.Object{api.Wrap(t)}, pb.ApplyMode_APPLY_MODE_UPDATE, dryRun, read)
			if changedSinceRead(err) {
				return fmt.Errorf("tenant %s changed since you read it: nothing was written; run the command again to change the tenant as it is now (%s)", t.GetName(), client.ErrorLine(err))
			}
			return err
		},
	}
	f := cmd.Flags()
	domains.register(f, "domains", "domain", "DNS names the tenant may route and get certificates for")
	networks.register(f, "networks", "network", "CIDRs where the tenant's backends live")
	pools.register(f, "pools", "pool", "VIP pools the tenant may allocate from")
	quotas.register(f)
	f.BoolVar(&podsRoutable, "pods-routable", false, "pod IPs are routable from the LB hosts (--pods-routable=false to turn off)")
	f.BoolVar(&dryRun, "dry-run", false, "have the cluster check the change; write nothing")
	return cmd
}

func orEmptyQuotas(q *pb.Quotas) *pb.Quotas {
	if q == nil {
		return &pb.Quotas{}
	}
	return q
}
