package cli

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// certCmd is `teapot-lb cert`: uploaded certificates and the status of
// every certificate, ACME ones included.
func (a *app) certCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "cert",
		Aliases: []string{"certs", "certificate", "certificates"},
		Short:   "Upload TLS certificates and show the state of every certificate",
	}
	cmd.AddCommand(a.certUploadCmd(), a.certListCmd(), a.certGetCmd(), a.certDeleteCmd())
	return cmd
}

func (a *app) certs(c *client.Conn) pb.CertificatesClient {
	return pb.NewCertificatesClient(c.ClientConn())
}

func (a *app) certUploadCmd() *cobra.Command {
	var tenant, certFile, keyFile string
	cmd := &cobra.Command{
		Use:   "upload [NAME] --tenant T --cert FILE --key FILE",
		Short: "Upload a certificate chain and its private key for a tenant (the key is never shown again)",
		Long: "Upload stores a PEM certificate chain (the server's certificate first) and its\n" +
			"private key for a tenant. The key must match, the certificate must be valid now\n" +
			"and name only hosts inside the tenant's domains. NAME defaults to the first host\n" +
			"of the certificate with dots as dashes (\"*.acme.example\" -> \"wildcard-acme-example\").\n" +
			"List the name in a listener's tls.certificates to serve it.",
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if tenant == "" || certFile == "" || keyFile == "" {
				return fmt.Errorf("cert upload needs --tenant, --cert and --key (see '%s --help')", cmd.CommandPath())
			}
			certPEM, err := os.ReadFile(certFile)
			if err != nil {
				return fmt.Errorf("--cert: %w", err)
			}
			keyPEM, err := os.ReadFile(keyFile)
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			name := ""
			if len(argv) == 1 {
				name = argv[0]
			} else if name, err = defaultCertName(certPEM); err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				out, err := a.certs(c).Upload(ctx, &pb.UploadCertificateRequest{Tenant: tenant, Name: name, CertPem: certPEM, KeyPem: keyPEM})
				if err != nil {
					return err
				}
				if !a.tabular() {
					return manifest.Encode(cmd.OutOrStdout(), []*pb.Object{api.Wrap(out)}, string(a.output))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "certificate %s/%s uploaded (%s, valid until %s)\n", out.GetTenant(), out.GetName(),
					list(out.GetHosts()), out.GetNotAfter().AsTime().UTC().Format(time.RFC3339))
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "tenant the certificate belongs to")
	f.StringVar(&certFile, "cert", "", "PEM file with the certificate chain, server certificate first")
	f.StringVar(&keyFile, "key", "", "PEM file with the private key")
	return cmd
}

// defaultCertName names a certificate after its first host.
func defaultCertName(certPEM []byte) (string, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return "", fmt.Errorf("--cert holds no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "", fmt.Errorf("--cert: %w", err)
	}
	host := c.Subject.CommonName
	if len(c.DNSNames) > 0 {
		host = c.DNSNames[0]
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", fmt.Errorf("--cert names no host; give the certificate a NAME")
	}
	name := strings.NewReplacer("*", "wildcard", ".", "-").Replace(host)
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	return name, nil
}

func (a *app) certListCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "list [--tenant T]",
		Short: "List certificates with their state, expiry and last error",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				resp, err := a.certs(c).List(ctx, &pb.ListCertificatesRequest{Tenant: tenant})
				if err != nil {
					return err
				}
				objs := make([]*pb.Object, 0, len(resp.GetCertificates()))
				for _, c := range resp.GetCertificates() {
					objs = append(objs, api.Wrap(c))
				}
				sortObjects(objs)
				if !a.tabular() {
					return manifest.EncodeList(cmd.OutOrStdout(), objs, string(a.output))
				}
				if len(objs) == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "no certificates found")
					return nil
				}
				return writeCerts(cmd.OutOrStdout(), objs)
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's certificates")
	return cmd
}

// writeCerts prints the certificate table; the last error goes last as it
// may be long.
func writeCerts(w io.Writer, objs []*pb.Object) error {
	t := newTable(w)
	t.row("TENANT", "NAME", "HOSTS", "SOURCE", "ISSUER", "STATE", "NOT AFTER", "LAST ERROR")
	for _, o := range objs {
		v := o.GetCertificate()
		t.row(v.GetTenant(), v.GetName(), list(v.GetHosts()), v.GetSource(), orDash(v.GetIssuer()), orDash(v.GetState()),
			notAfter(v), orDash(v.GetLastError()))
	}
	return t.flush()
}

func notAfter(c *pb.Certificate) string {
	if c.GetNotAfter() == nil {
		return "-"
	}
	return c.GetNotAfter().AsTime().UTC().Format(time.RFC3339)
}

func (a *app) certGetCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "get NAME --tenant T | get TENANT/NAME",
		Short: "Show one certificate: hosts, issuer, expiry, state and the last error",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ref, err := refOf(api.KindCertificate, argv[0], tenant)
			if err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				v, err := a.certs(c).Get(ctx, &pb.GetCertificateRequest{Tenant: ref.GetTenant(), Name: ref.GetName()})
				if err != nil {
					return err
				}
				if !a.tabular() {
					return manifest.Encode(cmd.OutOrStdout(), []*pb.Object{api.Wrap(v)}, string(a.output))
				}
				t := newTable(cmd.OutOrStdout())
				t.row("Name:", v.GetTenant()+"/"+v.GetName())
				t.row("Hosts:", list(v.GetHosts()))
				t.row("Source:", v.GetSource())
				t.row("Issuer:", orDash(v.GetIssuer()))
				t.row("Not after:", notAfter(v))
				t.row("State:", orDash(v.GetState()))
				t.row("Last error:", orDash(v.GetLastError()))
				return t.flush()
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant of the certificate")
	return cmd
}

func (a *app) certDeleteCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "delete NAME --tenant T | delete TENANT/NAME",
		Short: "Delete an uploaded certificate and its key",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ref, err := refOf(api.KindCertificate, argv[0], tenant)
			if err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				if _, err := a.certs(c).Delete(ctx, &pb.DeleteCertificateRequest{Tenant: ref.GetTenant(), Name: ref.GetName()}); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "certificate %s/%s deleted\n", ref.GetTenant(), ref.GetName())
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant of the certificate")
	return cmd
}
