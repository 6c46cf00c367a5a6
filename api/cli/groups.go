package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func (a *app) tenantCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tenant",
		Aliases: []string{"tenants"},
		Short:   "Manage tenants: the clusters that get load balancers",
		Args:    args(cobra.NoArgs),
	}
	var (
		podsRoutable        bool
		domains, nets, pool []string
	)
	quotas := newQuotaFlags()
	create := &cobra.Command{
		Use:     "create NAME",
		Short:   "Create a tenant",
		Example: "  teapot-lb tenant create acme --domains acme.example --networks 10.20.0.0/16 --pools public --max-lbs 20",
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			tenant := &pb.Tenant{Name: argv[0], Domains: domains, Networks: nets, Pools: pool, PodsRoutable: podsRoutable}
			q := &pb.Quotas{}
			if err := quotas.set(cmd, q); err != nil {
				return err
			}
			if !proto.Equal(q, &pb.Quotas{}) {
				tenant.Quotas = q
			}
			return a.apply(cmd, []*pb.Object{api.Wrap(tenant)}, pb.ApplyMode_APPLY_MODE_CREATE)
		},
	}
	f := create.Flags()
	f.StringSliceVar(&domains, "domains", nil, "DNS names (and their subdomains) the tenant may route and get certificates for")
	f.StringSliceVar(&nets, "networks", nil, "CIDRs where the tenant's backends live; nothing else is dialled")
	f.StringSliceVar(&pool, "pools", nil, "VIP pools the tenant may allocate from")
	quotas.register(f)
	f.BoolVar(&podsRoutable, "pods-routable", false, "pod IPs are routable from the LB hosts")

	cmd.AddCommand(create, a.tenantUpdateCmd(),
		a.listCmd(api.KindTenant, false),
		a.getOneCmd(api.KindTenant),
		a.deleteOneCmd(api.KindTenant),
	)
	cmd.AddCommand(a.tenantCredentialCmds()...)
	return cmd
}

func (a *app) poolCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "pool",
		Aliases: []string{"pools", "vippool"},
		Short:   "Manage VIP pools: the addresses load balancers get",
		Args:    args(cobra.NoArgs),
	}
	var p pb.VIPPool
	create := &cobra.Command{
		Use:     "create NAME",
		Short:   "Create a VIP pool",
		Example: "  teapot-lb pool create public --cidr 192.0.2.0/28 --cidr 2001:db8:10::/124 --mode arp",
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if len(p.Cidrs) == 0 {
				return fmt.Errorf("pool create needs --cidr (a CIDR like 192.0.2.0/28 or a range like 192.0.2.10-192.0.2.20)")
			}
			pool := &pb.VIPPool{Name: argv[0], Cidrs: p.Cidrs, Mode: p.Mode, Tenants: p.Tenants, AllowShared: p.AllowShared, Communities: p.Communities, Interface: p.Interface}
			return a.apply(cmd, []*pb.Object{api.Wrap(pool)}, pb.ApplyMode_APPLY_MODE_CREATE)
		},
	}
	f := create.Flags()
	f.StringSliceVar(&p.Cidrs, "cidr", nil, "CIDR or range of addresses (repeatable or comma-separated)")
	f.StringVar(&p.Mode, "mode", "arp", "how addresses are announced: arp, bgp or static")
	f.StringSliceVar(&p.Tenants, "tenants", nil, "only these tenants may use the pool (default: every tenant that lists it)")
	f.BoolVar(&p.AllowShared, "allow-shared", false, "load balancers of one tenant may share an address on distinct ports")
	f.StringSliceVar(&p.Communities, "community", nil, "BGP community for the pool's routes, like 65000:100 (repeatable)")
	f.StringVar(&p.Interface, "interface", "", "arp pools: the interface of every LB host the addresses live on (default: each host's --vip-interface)")
	_ = create.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]string{"arp", "bgp", "static"}, cobra.ShellCompDirectiveNoFileComp))

	cmd.AddCommand(create,
		a.listCmd(api.KindVIPPool, false),
		a.getOneCmd(api.KindVIPPool),
		a.deleteOneCmd(api.KindVIPPool),
	)
	return cmd
}

func (a *app) lbCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "lb",
		Aliases: []string{"lbs", "loadbalancer"},
		Short:   "Inspect and delete load balancers (create them with apply or control-plane)",
		Args:    args(cobra.NoArgs),
	}
	cmd.AddCommand(
		a.controlPlaneCmd(),
		a.listCmd(api.KindLoadBalancer, true),
		a.getOneCmd(api.KindLoadBalancer),
		a.deleteOneCmd(api.KindLoadBalancer),
	)
	return cmd
}

func (a *app) listCmd(kind string, namespaced bool) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List " + plural(kind),
		Args:    args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.list(cmd, kind, tenant)
		},
	}
	if namespaced {
		cmd.Flags().StringVar(&tenant, "tenant", "", "only load balancers of this tenant")
	}
	return cmd
}

func (a *app) getOneCmd(kind string) *cobra.Command {
	var tenant string
	use := "get NAME"
	if api.Namespaced(kind) {
		use = "get TENANT/NAME"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: "Show one " + lower(kind),
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ref, err := refOf(kind, argv[0], tenant)
			if err != nil {
				return err
			}
			return a.show(cmd, ref)
		},
		ValidArgsFunction: a.completeNamesOf(kind),
	}
	if api.Namespaced(kind) {
		cmd.Flags().StringVar(&tenant, "tenant", "", "tenant of the load balancer")
	}
	return cmd
}

func (a *app) deleteOneCmd(kind string) *cobra.Command {
	var tenant string
	use := "delete NAME..."
	if api.Namespaced(kind) {
		use = "delete TENANT/NAME..."
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: "Delete " + plural(kind),
		Args:  args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			refs := make([]*pb.ObjectRef, 0, len(argv))
			for _, name := range argv {
				ref, err := refOf(kind, name, tenant)
				if err != nil {
					return err
				}
				refs = append(refs, ref)
			}
			return a.delete(cmd, refs...)
		},
		ValidArgsFunction: a.completeNamesOf(kind),
	}
	if api.Namespaced(kind) {
		cmd.Flags().StringVar(&tenant, "tenant", "", "tenant of the load balancers")
	}
	return cmd
}

// completeNamesOf completes names of one kind.
func (a *app) completeNamesOf(kind string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, argv []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return a.completeKindAndName(cmd, append([]string{kind}, argv...), toComplete)
	}
}
