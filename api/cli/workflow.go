package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// diffSkip are the fields diff leaves out: what the cluster stamps and
// what the hosts observe, which an apply never changes by itself.
var diffSkip = []string{"meta", "uid", "revokedCredentials", "status.problems", "status.observed"}

func (a *app) diffCmd() *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "diff -f FILE",
		Short: "Show, field by field, what applying manifest files would change",
		Long: "Diff asks the cluster to check the files as apply would (a dry run against its current\n" +
			"state, nothing written) and prints, per object, what would change:\n" +
			"  + field: value            added\n" +
			"  - field: value            removed\n" +
			"  ~ field: old -> new       changed\n" +
			"Exit status: 0 no differences, 1 differences, 2 an error or a change the cluster refuses.",
		Example: "  teapot-lb diff -f shop.yaml\n  teapot-lb get lb acme/shop -o yaml | sed s/30080/30081/ | teapot-lb diff -f -",
		Args:    args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			objs, err := readAll(cmd, "diff", files)
			if err != nil {
				return &exitError{2, err}
			}
			changed := false
			err = a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				var err error
				changed, err = diffObjects(ctx, cmd.OutOrStdout(), c, objs)
				return err
			})
			switch {
			case err != nil:
				return &exitError{2, err}
			case changed:
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, directory or - for standard input (repeatable)")
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return cmd
}

// diffObjects prints what applying objs would change and reports whether
// anything would.
func diffObjects(ctx context.Context, w io.Writer, c *client.Conn, objs []*pb.Object) (bool, error) {
	dr, err := dryRunCall(ctx, c, &pb.DryRunRequest{Write: &pb.DryRunRequest_Apply{Apply: &pb.ApplyRequest{Objects: objs}}})
	if err != nil {
		return false, err
	}
	resp := dr.GetApply()
	changed := false
	for i, after := range resp.GetObjects() {
		ref := api.RefOf(after)
		result := resp.GetResults()[i]
		fmt.Fprintf(w, "%s %s\n", objectPath(ref), result)
		if result == "unchanged" {
			continue
		}
		changed = true
		var before []manifest.Leaf
		if result != "created" {
			old, err := c.Admin.Get(ctx, &pb.GetRequest{Ref: ref})
			if err != nil {
				return changed, fmt.Errorf("read %s: %w", objectPath(ref), err)
			}
			before = manifest.Flatten(api.RedactSecrets(old), diffSkip...)
		}
		for _, line := range leafDiff(before, manifest.Flatten(api.RedactSecrets(after), diffSkip...)) {
			fmt.Fprintln(w, "  "+line)
		}
	}
	return changed, nil
}

// leafDiff compares two flattened objects: changed and added fields in the
// order of after, then removed fields in the order of before.
func leafDiff(before, after []manifest.Leaf) []string {
	old := make(map[string]string, len(before))
	for _, l := range before {
		old[l.Path] = l.Value
	}
	seen := make(map[string]bool, len(after))
	var out []string
	for _, l := range after {
		seen[l.Path] = true
		v, ok := old[l.Path]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("+ %s: %s", l.Path, l.Value))
		case v != l.Value:
			out = append(out, fmt.Sprintf("~ %s: %s -> %s", l.Path, v, l.Value))
		}
	}
	for _, l := range before {
		if !seen[l.Path] {
			out = append(out, fmt.Sprintf("- %s: %s", l.Path, l.Value))
		}
	}
	return out
}

// editHeader opens the file edit gives the editor.
const editHeader = `# Edit %s below, save and quit to apply it; quit without saving (or empty
# the file) to leave it as it is. The cluster checks the change as apply does and
# writes nothing if it refuses. Fields: teapot-lb schema %s
`

func (a *app) editCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "edit KIND NAME",
		Short: "Edit one object in $EDITOR and apply it",
		Long: "Edit writes the object as YAML to a temporary file, opens it in $VISUAL or $EDITOR (vi if\n" +
			"neither is set) and applies what was saved, with the same validation as apply. If the\n" +
			"file cannot be read or the cluster refuses the change, nothing is written and the\n" +
			"edited file is kept: the error names it, so it can be fixed and applied with apply -f.\n" +
			"The change is written only if nobody changed the object since edit read it.",
		Example: "  teapot-lb edit lb acme/shop\n  EDITOR=nano teapot-lb edit tenant acme",
		Args:    args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			kind, err := api.ParseKind(argv[0])
			if err != nil {
				return err
			}
			if !editable(kind) {
				return fmt.Errorf("%s objects are managed by the cluster; edit works on tenants, pools and load balancers", kind)
			}
			ref, err := refOf(kind, argv[1], tenant)
			if err != nil {
				return err
			}
			return a.edit(cmd, ref)
		},
		ValidArgsFunction: a.completeKindAndName,
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant of the load balancer")
	return cmd
}

func editable(kind string) bool {
	for _, k := range manifest.Kinds {
		if k == kind {
			return true
		}
	}
	return false
}

// edit fetches ref, lets the user edit it and applies the result.
func (a *app) edit(cmd *cobra.Command, ref *pb.ObjectRef) error {
	var obj *pb.Object
	err := a.call(cmd, func(ctx context.Context, c *client.Conn) error {
		var err error
		obj, err = c.Admin.Get(ctx, &pb.GetRequest{Ref: ref})
		return err
	})
	if err != nil {
		return err
	}
	obj = api.RedactSecrets(obj)
	// The write is made only if nobody changed the object meanwhile.
	read := &pb.RevisionPrecondition{Ref: api.RefOf(obj), Revision: api.MetaOf(obj).GetRevision()}
	specOnly(obj)
	var buf bytes.Buffer
	fmt.Fprintf(&buf, editHeader, objectPath(ref), lower(ref.GetKind()))
	if err := manifest.Encode(&buf, []*pb.Object{obj}, manifest.FormatYAML); err != nil {
		return err
	}
	f, err := os.CreateTemp("", "teapot-lb-edit-*.yaml")
	if err != nil {
		return fmt.Errorf("edit: %w", err)
	}
	path := f.Name()
	_, err = f.Write(buf.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("edit: write %s: %w", path, err)
	}
	if err := runEditor(cmd, path); err != nil {
		os.Remove(path)
		return err
	}
	edited, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("edit: read %s: %w", path, bare(err))
	}
	w := cmd.OutOrStdout()
	if bytes.Equal(edited, buf.Bytes()) || len(bytes.TrimSpace(stripComments(edited))) == 0 {
		os.Remove(path)
		fmt.Fprintf(w, "edit cancelled: %s is unchanged\n", objectPath(ref))
		return nil
	}
	kept := func(err error) error {
		return fmt.Errorf("%w; nothing was written, and your edits are kept in %s (fix them and run teapot-lb apply -f %s)", err, path, path)
	}
	objs, err := manifest.Decode(bytes.NewReader(edited), path)
	if err != nil {
		return kept(err)
	}
	if len(objs) != 1 || objectPath(api.RefOf(objs[0])) != objectPath(ref) {
		return kept(fmt.Errorf("the file must hold %s alone; to create or rename objects use apply", objectPath(ref)))
	}
	if err := a.applyObjects(cmd, objs, pb.ApplyMode_APPLY_MODE_UPDATE, false, read); err != nil {
		if changedSinceRead(err) {
			return fmt.Errorf("%s changed since you read it: nothing was written, and your edits are kept in %s; run teapot-lb edit again to start from the object as it is now, or teapot-lb apply -f %s to write yours over the other change (%s)",
				objectPath(ref), path, path, client.ErrorLine(err))
		}
		return kept(errors.New(client.ErrorLine(err)))
	}
	os.Remove(path)
	return nil
}

// specOnly clears what the cluster stamps, which an edit cannot change.
func specOnly(o *pb.Object) {
	switch v := api.Unwrap(o).(type) {
	case *pb.Tenant:
		v.Meta, v.Uid, v.RevokedCredentials = nil, "", nil
	case *pb.VIPPool:
		v.Meta = nil
	case *pb.LoadBalancer:
		v.Meta, v.Status = nil, nil
	}
}

// stripComments drops the lines that are only a comment.
func stripComments(b []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '#' {
			continue
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// runEditor runs $VISUAL, $EDITOR or vi on path; the variable may hold
// arguments ("code --wait").
func runEditor(cmd *cobra.Command, path string) error {
	editor := os.Getenv("VISUAL")
	if strings.TrimSpace(editor) == "" {
		editor = os.Getenv("EDITOR")
	}
	if strings.TrimSpace(editor) == "" {
		editor = "vi"
	}
	e := exec.CommandContext(cmd.Context(), "/bin/sh", "-c", editor+` "$1"`, "editor", path)
	e.Stdin, e.Stdout, e.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := e.Run(); err != nil {
		return fmt.Errorf("editor %q: %w; nothing was written", editor, err)
	}
	return nil
}

// changedSinceRead reports whether err is the cluster's refusal of a write
// whose revision precondition failed.
func changedSinceRead(err error) bool {
	return errors.Is(api.FromStatus(err), api.ErrChanged)
}

// dryRunCall asks the cluster to check a write without making it. The
// call is its own RPC, and hosts carry it to the leader as a write a
// leader of an older release refuses, so no host can mistake it for the
// write itself.
func dryRunCall(ctx context.Context, c *client.Conn, req *pb.DryRunRequest) (*pb.DryRunResponse, error) {
	resp, err := c.Admin.DryRun(ctx, req)
	if status.Code(err) == codes.Unimplemented {
		return nil, errors.New("the host answering runs a release without dry runs and refused the check; nothing was written: upgrade it first (cluster status shows each host's version)")
	}
	return resp, err
}
