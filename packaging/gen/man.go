package gen

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// ManCommand is a hidden command that writes a man page for every command
// of its root into a folder, dated SOURCE_DATE_EPOCH (or today), for the
// packages.
func ManCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write the man pages of every command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			date := time.Now().UTC()
			if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
				}
				date = time.Unix(n, 0).UTC()
			}
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			return doc.GenManTree(root, &doc.GenManHeader{Title: "TEAPOT-LB", Section: "1", Date: &date, Source: "teapot-lb", Manual: "teapot-lb manual"}, args[0])
		},
	}
}
