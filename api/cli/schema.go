package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/teapot-lb/teapot-lb/api/schema"
)

func (a *app) schemaCmd() *cobra.Command {
	var jsonSchema bool
	cmd := &cobra.Command{
		Use:   "schema [KIND[.FIELD...]]",
		Short: "Describe the manifest format: the fields of a kind, or one field and what is under it",
		Long: "Schema prints the fields an operator writes in manifests, with their types, defaults,\n" +
			"limits and meaning, as docs/reference.md does: for a kind (pool, tenant, lb) or a field\n" +
			"path under it. Map keys may be given or left out (lb.pools.web.members or\n" +
			"lb.pools.members). --json-schema prints a JSON Schema of manifest documents for\n" +
			"editors (yaml-language-server). Nothing here asks the cluster.",
		Example: "  teapot-lb schema lb\n  teapot-lb schema lb.listeners.tls\n  teapot-lb schema lb.pools.healthCheck.interval\n" +
			"  teapot-lb schema --json-schema > teapot-lb.schema.json",
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ref := schema.Default()
			w := cmd.OutOrStdout()
			if jsonSchema {
				if len(argv) > 0 {
					return errors.New("--json-schema describes every kind; give no path with it")
				}
				return ref.JSONSchema(w)
			}
			if len(argv) == 0 {
				tw := newTable(w)
				tw.row("KIND", "ALIASES", "DESCRIPTION")
				for _, k := range ref.Kinds {
					tw.row(k.Name, strings.Join(k.Aliases, ","), k.Doc)
				}
				if err := tw.flush(); err != nil {
					return err
				}
				fmt.Fprintln(w, "\nteapot-lb schema KIND[.FIELD...] describes one (like teapot-lb schema lb.listeners).")
				return nil
			}
			k, f, err := ref.Lookup(argv[0])
			if err != nil {
				return err
			}
			return ref.Text(w, k, f)
		},
	}
	cmd.Flags().BoolVar(&jsonSchema, "json-schema", false, "print a JSON Schema (draft 07) of manifest documents")
	cmd.ValidArgsFunction = completeSchemaPath
	return cmd
}

// completeSchemaPath completes a kind, then the fields under what is
// typed so far ("lb.listeners.t" -> "lb.listeners.tls").
func completeSchemaPath(_ *cobra.Command, argv []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(argv) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ref := schema.Default()
	var out []string
	if !strings.Contains(toComplete, ".") {
		for _, k := range ref.Kinds {
			for _, name := range k.Aliases {
				if strings.HasPrefix(name, strings.ToLower(toComplete)) {
					out = append(out, name)
				}
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
	i := strings.LastIndex(toComplete, ".")
	parent := toComplete[:i]
	k, f, err := ref.Lookup(parent)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	fields := k.Fields
	if f != nil {
		fields = f.Fields
	}
	for _, x := range fields {
		if strings.HasPrefix(strings.ToLower(x.Name), strings.ToLower(toComplete[i+1:])) {
			out = append(out, parent+"."+x.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}
