package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// kindRank orders kinds so that what an object names is applied first.
func kindRank(kind string) int {
	for i, k := range manifest.Kinds {
		if k == kind {
			return i
		}
	}
	return len(manifest.Kinds)
}

func (a *app) applyCmd() *cobra.Command {
	var files []string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or update the objects of manifest files",
		Long: "Apply creates or updates every object of the given manifests in one all-or-nothing\n" +
			"change. FILE is a YAML or JSON file, a directory of them, or - for standard input.\n" +
			"Applying the same files again changes nothing. With --dry-run the cluster checks the\n" +
			"change against its current state exactly as it would apply it, and writes nothing.\n" +
			"The fields of each kind: teapot-lb schema KIND (docs/reference.md).",
		Example: "  teapot-lb apply -f shop.yaml\n  teapot-lb apply -f shop.yaml --dry-run\n" +
			"  teapot-lb get lb acme/shop -o yaml | teapot-lb apply -f -",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			objs, err := readAll(cmd, "apply", files)
			if err != nil {
				return err
			}
			return a.applyObjects(cmd, objs, pb.ApplyMode_APPLY_MODE_UPSERT, dryRun)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, directory or - for standard input (repeatable)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "have the cluster check the change against its current state; write nothing (exit 1 if refused)")
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return cmd
}

// readAll reads the objects of every -f argument of verb, in the order
// they can be applied (pools, tenants, load balancers).
func readAll(cmd *cobra.Command, verb string, files []string) ([]*pb.Object, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("%s needs -f FILE (or -f - for standard input)", verb)
	}
	var objs []*pb.Object
	for _, f := range files {
		o, err := readManifests(cmd, f)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o...)
	}
	if len(objs) == 0 {
		names := make([]string, len(files))
		for i, f := range files {
			names[i] = f
			if f == "-" {
				names[i] = "standard input"
			}
		}
		return nil, fmt.Errorf("no objects in %s", strings.Join(names, ", "))
	}
	sort.SliceStable(objs, func(i, j int) bool {
		return kindRank(api.RefOf(objs[i]).GetKind()) < kindRank(api.RefOf(objs[j]).GetKind())
	})
	return objs, nil
}

// apply sends objects in one Apply call and reports what became of each.
func (a *app) apply(cmd *cobra.Command, objs []*pb.Object, mode pb.ApplyMode) error {
	return a.applyObjects(cmd, objs, mode, false)
}

// applyObjects is apply, or with dryRun the cluster's check of it. With
// preconditions the cluster writes only if the objects they name are
// still at the revisions given.
func (a *app) applyObjects(cmd *cobra.Command, objs []*pb.Object, mode pb.ApplyMode, dryRun bool, pre ...*pb.RevisionPrecondition) error {
	return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
		req := &pb.ApplyRequest{Objects: objs, Mode: mode, Preconditions: pre}
		if err := checkFeatureLevels(ctx, c, objs); err != nil {
			return err
		}
		var resp *pb.ApplyResponse
		var err error
		suffix := ""
		if dryRun {
			var dr *pb.DryRunResponse
			dr, err = dryRunCall(ctx, c, &pb.DryRunRequest{Write: &pb.DryRunRequest_Apply{Apply: req}})
			resp, suffix = dr.GetApply(), " (dry run)"
		} else {
			resp, err = c.Admin.Apply(ctx, req)
		}
		if err != nil {
			return err
		}
		if !a.tabular() {
			return manifest.Encode(cmd.OutOrStdout(), redacted(resp.GetObjects()), string(a.output))
		}
		w := cmd.OutOrStdout()
		for i, o := range objs {
			ref := api.RefOf(o)
			if i < len(resp.GetObjects()) {
				ref = api.RefOf(resp.GetObjects()[i])
			}
			result := "configured"
			if i < len(resp.GetResults()) {
				result = resp.GetResults()[i]
			}
			fmt.Fprintf(w, "%s %s%s\n", objectPath(ref), result, suffix)
		}
		return nil
	})
}

// readManifests decodes a file, every manifest of a directory, or
// standard input for "-".
func readManifests(cmd *cobra.Command, name string) ([]*pb.Object, error) {
	if name == "-" {
		return manifest.Decode(cmd.InOrStdin(), "stdin")
	}
	fi, err := os.Stat(name)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, bare(err))
	}
	if !fi.IsDir() {
		return decodeFile(name)
	}
	entries, err := os.ReadDir(name)
	if err != nil {
		return nil, fmt.Errorf("read manifests in %s: %w", name, bare(err))
	}
	var objs []*pb.Object
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		if e.IsDir() {
			continue
		}
		o, err := decodeFile(filepath.Join(name, e.Name()))
		if err != nil {
			return nil, err
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

// bare drops the operation and path from a file error: the message names
// the file already.
// redacted is objs without the secrets the hosts leave out of every
// answer; the CLI leaves them out too, whatever release answered.
func redacted(objs []*pb.Object) []*pb.Object {
	out := make([]*pb.Object, len(objs))
	for i, o := range objs {
		out[i] = api.RedactSecrets(o)
	}
	return out
}

func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func decodeFile(path string) ([]*pb.Object, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", path, bare(err))
	}
	defer f.Close()
	return manifest.Decode(f, path)
}

func (a *app) getCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "get KIND [NAME]",
		Short: "List objects of a kind, or show one",
		Long: "Get lists the objects of a kind (tenants, pools, lbs, nodes, certs), or shows one.\n" +
			"Load balancers and certificates are named TENANT/NAME (or NAME with --tenant).",
		Example: "  teapot-lb get pools\n  teapot-lb get lb --tenant acme\n  teapot-lb get lb acme/shop -o yaml",
		Args:    args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			kind, err := api.ParseKind(argv[0])
			if err != nil {
				return err
			}
			if len(argv) == 2 {
				ref, err := refOf(kind, argv[1], tenant)
				if err != nil {
					return err
				}
				return a.show(cmd, ref)
			}
			return a.list(cmd, kind, tenant)
		},
		ValidArgsFunction: a.completeKindAndName,
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only objects of this tenant (load balancers, certificates)")
	return cmd
}

func (a *app) deleteCmd() *cobra.Command {
	var (
		tenant string
		files  []string
		opts   deleteOpts
	)
	cmd := &cobra.Command{
		Use:   "delete KIND NAME... | delete -f FILE",
		Short: "Delete objects, named or as listed in manifest files",
		Long: "Delete removes the named objects, or with -f every object of the given manifests\n" +
			"(load balancers first, then tenants, then pools), one after the other. With --dry-run\n" +
			"the cluster checks each deletion against its current state, as if it were the only\n" +
			"one, and deletes nothing.",
		Example: "  teapot-lb delete lb acme/shop\n  teapot-lb delete pool public\n  teapot-lb delete -f shop.yaml --ignore-not-found",
		Args: args(func(cmd *cobra.Command, argv []string) error {
			if len(files) > 0 {
				if len(argv) > 0 {
					return errors.New("give either -f FILE or KIND NAME..., not both")
				}
				return nil
			}
			return cobra.MinimumNArgs(2)(cmd, argv)
		}),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if len(files) > 0 {
				if tenant != "" {
					return errors.New("--tenant does not apply with -f: the files name each object's tenant")
				}
				objs, err := readAll(cmd, "delete", files)
				if err != nil {
					return err
				}
				refs := make([]*pb.ObjectRef, len(objs))
				for i, o := range objs {
					refs[len(objs)-1-i] = api.RefOf(o)
				}
				return a.deleteRefs(cmd, refs, opts)
			}
			kind, err := api.ParseKind(argv[0])
			if err != nil {
				return err
			}
			refs := make([]*pb.ObjectRef, 0, len(argv)-1)
			for _, name := range argv[1:] {
				ref, err := refOf(kind, name, tenant)
				if err != nil {
					return err
				}
				refs = append(refs, ref)
			}
			return a.deleteRefs(cmd, refs, opts)
		},
		ValidArgsFunction: a.completeKindAndName,
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "tenant of the objects (load balancers, certificates)")
	f.StringArrayVarP(&files, "filename", "f", nil, "delete the objects of this manifest file, directory or - for standard input (repeatable)")
	f.BoolVar(&opts.ignoreNotFound, "ignore-not-found", false, "an object that does not exist is not an error")
	f.BoolVar(&opts.dryRun, "dry-run", false, "have the cluster check each deletion; delete nothing")
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return cmd
}

// deleteOpts are the flags of delete.
type deleteOpts struct {
	ignoreNotFound, dryRun bool
}

// refOf names an object from the command line: NAME, or TENANT/NAME for
// namespaced kinds.
func refOf(kind, name, tenant string) (*pb.ObjectRef, error) {
	ref := &pb.ObjectRef{Kind: kind, Name: name}
	if !api.Namespaced(kind) {
		if tenant != "" {
			return nil, fmt.Errorf("--tenant does not apply to kind %s", kind)
		}
		return ref, nil
	}
	if t, n, ok := strings.Cut(name, "/"); ok {
		if tenant != "" && tenant != t {
			return nil, fmt.Errorf("%s names tenant %s but --tenant is %s", name, t, tenant)
		}
		ref.Tenant, ref.Name = t, n
	} else {
		ref.Tenant = tenant
	}
	if ref.Tenant == "" || ref.Name == "" {
		return nil, fmt.Errorf("%s %q: write TENANT/NAME or pass --tenant", kind, name)
	}
	return ref, nil
}

// show prints one object.
func (a *app) show(cmd *cobra.Command, ref *pb.ObjectRef) error {
	return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
		o, err := c.Admin.Get(ctx, &pb.GetRequest{Ref: ref})
		if err != nil {
			return err
		}
		var holders map[string]string
		if lb := o.GetLoadBalancer(); lb != nil {
			holders = a.withObserved(ctx, c, []*pb.Object{o}, &pb.ObserveRequest{LoadBalancer: lb.GetTenant() + "/" + lb.GetName()})
		}
		if !a.tabular() {
			return manifest.Encode(cmd.OutOrStdout(), redacted([]*pb.Object{o}), string(a.output))
		}
		lbs, err := a.loadBalancersFor(ctx, c, ref.GetKind())
		if err != nil {
			return err
		}
		return a.writeTable(cmd.OutOrStdout(), ref.GetKind(), []*pb.Object{o}, lbs, holders)
	})
}

// list prints every object of a kind (of one tenant if given).
func (a *app) list(cmd *cobra.Command, kind, tenant string) error {
	if tenant != "" && !api.Namespaced(kind) {
		return fmt.Errorf("--tenant does not apply to kind %s", kind)
	}
	return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
		objs, _, err := client.ListAll(ctx, c.Admin, &pb.ListRequest{Kind: kind, Tenant: tenant})
		if err != nil {
			return err
		}
		sortObjects(objs)
		var holders map[string]string
		if kind == api.KindLoadBalancer && len(objs) > 0 {
			holders = a.withObserved(ctx, c, objs, &pb.ObserveRequest{Tenant: tenant})
		}
		if !a.tabular() {
			return manifest.EncodeList(cmd.OutOrStdout(), redacted(objs), string(a.output))
		}
		if len(objs) == 0 {
			what := "no " + plural(kind) + " found"
			if tenant != "" {
				what += " for tenant " + tenant
			}
			fmt.Fprintln(cmd.ErrOrStderr(), what)
			return nil
		}
		lbs, err := a.loadBalancersFor(ctx, c, kind)
		if err != nil {
			return err
		}
		return a.writeTable(cmd.OutOrStdout(), kind, objs, lbs, holders)
	})
}

// withObserved sets status.observed of the load balancers among objs from
// what the hosts see now; when the hosts cannot be asked the phase is
// Unknown with the reason. It returns, per VIP, the hosts holding or
// announcing it and since when ("lb2 3m").
func (a *app) withObserved(ctx context.Context, c *client.Conn, objs []*pb.Object, req *pb.ObserveRequest) map[string]string {
	var hosts []*pb.HostObservation
	var failed string
	req.MaxEvents = 1
	resp, err := c.Admin.Observe(ctx, req)
	if err != nil {
		failed = "cannot ask the hosts: " + client.ErrorLine(err)
	} else {
		hosts = resp.GetHosts()
	}
	a.observed = hosts
	for _, o := range objs {
		lb := o.GetLoadBalancer()
		if lb == nil {
			continue
		}
		if lb.Status == nil {
			lb.Status = &pb.LoadBalancerStatus{}
		}
		if failed != "" {
			lb.Status.Observed = &pb.ObservedStatus{Phase: observe.Unknown, Reason: failed}
			continue
		}
		lb.Status.Observed = observe.Assess(lb, hosts)
	}
	holders := map[string]string{}
	now := a.now()
	seen := map[string]bool{}
	for _, h := range hosts {
		for _, v := range h.GetVips() {
			k := h.GetNodeId() + " " + v.GetAddress()
			if !observe.Held(v.GetState()) || seen[k] {
				continue
			}
			seen[k] = true
			held := h.GetNodeId() + " " + age(now, v.GetSince())
			if prev := holders[v.GetAddress()]; prev != "" {
				held = prev + "," + held
			}
			holders[v.GetAddress()] = held
		}
	}
	return holders
}

// loadBalancersFor fetches every load balancer when the table of kind
// counts them.
func (a *app) loadBalancersFor(ctx context.Context, c *client.Conn, kind string) ([]*pb.LoadBalancer, error) {
	if kind != api.KindTenant && kind != api.KindVIPPool {
		return nil, nil
	}
	objs, _, err := client.ListAll(ctx, c.Admin, &pb.ListRequest{Kind: api.KindLoadBalancer})
	if err != nil {
		return nil, err
	}
	lbs := make([]*pb.LoadBalancer, 0, len(objs))
	for _, o := range objs {
		lbs = append(lbs, o.GetLoadBalancer())
	}
	return lbs, nil
}

// delete removes objects one after the other, reporting each.
func (a *app) delete(cmd *cobra.Command, refs ...*pb.ObjectRef) error {
	return a.deleteRefs(cmd, refs, deleteOpts{})
}

// deleteRefs removes objects one after the other, reporting each; it stops
// at the first error.
func (a *app) deleteRefs(cmd *cobra.Command, refs []*pb.ObjectRef, opts deleteOpts) error {
	return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
		w := cmd.OutOrStdout()
		for _, ref := range refs {
			var err error
			if opts.dryRun {
				_, err = dryRunCall(ctx, c, &pb.DryRunRequest{Write: &pb.DryRunRequest_Delete{Delete: &pb.DeleteRequest{Ref: ref}}})
			} else {
				_, err = c.Admin.Delete(ctx, &pb.DeleteRequest{Ref: ref})
			}
			switch {
			case opts.ignoreNotFound && status.Code(err) == codes.NotFound:
				fmt.Fprintf(w, "%s not found\n", objectPath(ref))
				continue
			case err != nil:
				return err
			case opts.dryRun:
				fmt.Fprintf(w, "%s deleted (dry run)\n", objectPath(ref))
			default:
				fmt.Fprintf(w, "%s deleted\n", objectPath(ref))
			}
		}
		return nil
	})
}

func plural(kind string) string {
	switch kind {
	case api.KindVIPPool:
		return "pools"
	case api.KindLoadBalancer:
		return "load balancers"
	}
	return lower(kind) + "s"
}

// completeKindAndName completes the kind, then names of that kind.
func (a *app) completeKindAndName(cmd *cobra.Command, argv []string, _ string) ([]string, cobra.ShellCompDirective) {
	switch len(argv) {
	case 0:
		return []string{"tenants", "pools", "lbs", "nodes", "certs"}, cobra.ShellCompDirectiveNoFileComp
	case 1:
	default:
		if cmd.Name() != "delete" {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
	}
	kind, err := api.ParseKind(argv[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	err = a.call(cmd, func(ctx context.Context, c *client.Conn) error {
		objs, _, err := client.ListAll(ctx, c.Admin, &pb.ListRequest{Kind: kind})
		if err != nil {
			return err
		}
		sortObjects(objs)
		for _, o := range objs {
			ref := api.RefOf(o)
			if ref.GetTenant() != "" {
				names = append(names, ref.GetTenant()+"/"+ref.GetName())
			} else {
				names = append(names, ref.GetName())
			}
		}
		return nil
	})
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
