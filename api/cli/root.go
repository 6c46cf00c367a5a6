package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Build information, set with -ldflags "-X github.com/teapot-lb/teapot-lb/api/cli.Version=...".
var (
	Version = "dev"
	Commit  = "unknown"
)

// DefaultTimeout bounds one command's calls to the cluster.
const DefaultTimeout = 10 * time.Second

// Output formats of -o.
const (
	OutputTable = "table"
	// OutputWide is the table with more columns (the reasons).
	OutputWide = "wide"
	OutputJSON = manifest.FormatJSON
	OutputYAML = manifest.FormatYAML
)

// Option changes how the commands behave; tests use them.
type Option func(*app)

// WithClock sets the clock that ages ("5m", "3h") are measured against.
func WithClock(now func() time.Time) Option {
	return func(a *app) { a.now = now }
}

// app holds the global flags and options the commands share.
type app struct {
	now        func() time.Time
	configPath string
	server     string
	output     outputFlag
	timeout    time.Duration
	// observed is what the hosts answered for the objects shown (set by
	// withObserved), for the traffic of wide tables.
	observed []*pb.HostObservation
}

// NewRoot returns a "teapot-lb" root command with the client commands and
// their global flags. The main package adds serve and agent to it.
func NewRoot(opts ...Option) *cobra.Command {
	root := &cobra.Command{
		Use:   "teapot-lb",
		Short: "Multi-tenant load balancer for bare-metal Kubernetes fleets",
		Long: "teapot-lb runs on a small cluster of LB hosts and gives tenant Kubernetes clusters\n" +
			"load balancers on highly available virtual IPs. These commands manage the cluster\n" +
			"through its admin API; they find credentials like kubectl does (see --config).",
		Version: Version,
	}
	root.SetVersionTemplate(versionLine() + "\n")
	AddCommands(root, opts...)
	return root
}

// AddCommands registers the global flags (--config, --server, -o,
// --timeout) as persistent flags of root and adds the client commands.
func AddCommands(root *cobra.Command, opts ...Option) {
	a := &app{now: time.Now, output: OutputTable, timeout: DefaultTimeout}
	for _, o := range opts {
		o(a)
	}
	root.SilenceUsage = true
	root.SilenceErrors = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})

	pf := root.PersistentFlags()
	pf.StringVar(&a.configPath, "config", "", "admin config file (default: $"+client.EnvConfig+", ./"+client.DataDirConfig+", ~/.config/teapot-lb/"+client.ConfigFileName+", "+client.SystemConfig+")")
	pf.StringVar(&a.server, "server", "", "admin API address HOST:PORT to use instead of the config's servers (comma-separated for several)")
	pf.VarP(&a.output, "output", "o", "output format: table, wide, json or yaml")
	pf.DurationVar(&a.timeout, "timeout", DefaultTimeout, "give up on the cluster after this long")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{OutputTable, OutputWide, OutputJSON, OutputYAML}, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(
		a.applyCmd(), a.diffCmd(), a.getCmd(), a.deleteCmd(), a.editCmd(),
		a.tenantCmd(), a.poolCmd(), a.lbCmd(), a.clusterCmd(),
		a.versionCmd(),
		a.certCmd(),
		a.eventsCmd(), a.explainCmd(), a.schemaCmd(),
	)
}

// Main runs root with the process's arguments, prints an error as one
// line ("error: ...") on stderr and returns the exit code. The context of
// the commands ends on SIGINT or SIGTERM.
func Main(root *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root.SilenceUsage = true
	root.SilenceErrors = true
	root.InitDefaultCompletionCmd()
	guardGroups(root)
	if err := root.ExecuteContext(ctx); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(root.ErrOrStderr(), "error: "+client.ErrorLine(ee.err))
			}
			return ee.code
		}
		fmt.Fprintln(root.ErrOrStderr(), "error: "+client.ErrorLine(err))
		// An error may carry its own exit status (a refused serve
		// configuration: one the unit does not restart on).
		var coded interface{ ExitCode() int }
		if errors.As(err, &coded) {
			return coded.ExitCode()
		}
		return 1
	}
	return 0
}

// exitError ends a command with an exit code other than 1 (diff: 1 for
// "differences found", 2 for an error), printing err when set.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// guardGroups makes every command that only groups others (tenant, pool,
// cluster, ...) refuse an unknown subcommand with an error and exit
// status 1, instead of printing its help and succeeding. Given no
// arguments, a group prints its help.
func guardGroups(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		guardGroups(sub)
	}
	if !cmd.HasSubCommands() || cmd.Run != nil || cmd.RunE != nil || !cmd.HasParent() {
		return
	}
	cmd.Args = func(c *cobra.Command, argv []string) error {
		if len(argv) == 0 {
			return nil
		}
		var names []string
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() {
				names = append(names, s.Name())
			}
		}
		if c.SuggestionsMinimumDistance <= 0 {
			c.SuggestionsMinimumDistance = 2
		}
		msg := fmt.Sprintf("unknown command %q for %q", argv[0], c.CommandPath())
		if sugg := c.SuggestionsFor(argv[0]); len(sugg) > 0 {
			msg += fmt.Sprintf(" (did you mean %q?)", sugg[0])
		}
		return fmt.Errorf("%s; its commands are %s", msg, strings.Join(names, ", "))
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
}

// outputFlag is the value of -o; it refuses unknown formats when parsed.
type outputFlag string

func (o *outputFlag) String() string { return string(*o) }
func (o *outputFlag) Type() string   { return "format" }
func (o *outputFlag) Set(s string) error {
	switch s {
	case OutputTable, OutputWide, OutputJSON, OutputYAML:
		*o = outputFlag(s)
		return nil
	}
	return fmt.Errorf("unknown format %q: use table, wide, json or yaml", s)
}

// tabular reports whether the output is a table (-o table or wide).
func (a *app) tabular() bool { return a.output == OutputTable || a.output == OutputWide }

// call connects to the cluster and runs fn with a context bounded by
// --timeout.
func (a *app) call(cmd *cobra.Command, fn func(ctx context.Context, c *client.Conn) error) error {
	return a.connect(cmd, func(conn *client.Conn) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
		defer cancel()
		return fn(ctx, conn)
	})
}

// connect connects to the cluster and runs fn, which bounds its own calls
// (commands that keep watching).
func (a *app) connect(cmd *cobra.Command, fn func(c *client.Conn) error) error {
	path, err := client.FindConfig(a.configPath)
	if err != nil {
		return err
	}
	cfg, err := client.LoadConfig(path)
	if err != nil {
		return err
	}
	if a.timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
	defer cancel()
	conn, err := client.Dial(ctx, cfg, a.server)
	if err != nil {
		return err
	}
	defer conn.Close()
	return fn(conn)
}

// args wraps a cobra argument check so its error shows the usage line.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return fmt.Errorf("%w; usage: %s", err, cmd.UseLine())
		}
		return nil
	}
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := []field{
				{"version", Version}, {"commit", Commit},
				{"go", runtime.Version()}, {"platform", runtime.GOOS + "/" + runtime.GOARCH},
			}
			if !a.tabular() {
				return writeFields(cmd.OutOrStdout(), info, string(a.output))
			}
			tw := newTable(cmd.OutOrStdout())
			for _, f := range info {
				tw.row(f.key, f.val)
			}
			return tw.flush()
		},
	}
}

func versionLine() string {
	return fmt.Sprintf("teapot-lb %s (commit %s, %s)", Version, Commit, runtime.Version())
}

// lower renders a kind as in "vippool/public".
func lower(kind string) string { return strings.ToLower(kind) }
