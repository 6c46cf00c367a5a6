package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api/backup"
	"github.com/teapot-lb/teapot-lb/api/client"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// maxBackup bounds what the CLI accepts from the server.
const maxBackup = 1 << 30

func (a *app) backupCmd() *cobra.Command {
	var file, passFile string
	cmd := &cobra.Command{
		Use:   "backup -f FILE",
		Short: "Write a consistent copy of the cluster's state, certificates and CA to FILE (mode 0600)",
		Long: "backup reads the replicated state through the host given by --server (any host: it\n" +
			"first catches up with the leader) and writes it with the cluster CA to FILE. The file\n" +
			"holds every private key of the cluster: keep it safe, or seal it with\n" +
			"--passphrase-file. \"teapot-lb serve --restore FILE\" starts a new cluster from it.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("-f FILE: name the file to write the backup to")
			}
			var pass []byte
			if passFile != "" {
				var err error
				if pass, err = backup.ReadPassphrase(passFile); err != nil {
					return err
				}
			}
			return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
				stream, err := c.Admin.Backup(ctx, &pb.BackupRequest{})
				if err != nil {
					return err
				}
				var data []byte
				for {
					chunk, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						return err
					}
					if len(data)+len(chunk.GetData()) > maxBackup {
						return fmt.Errorf("the backup is larger than %d bytes", maxBackup)
					}
					data = append(data, chunk.GetData()...)
				}
				contents, err := backup.EncodeRaw(data, pass)
				if err != nil {
					return err
				}
				if err := backup.WriteFile(file, contents); err != nil {
					return err
				}
				var b pb.Backup
				_ = proto.Unmarshal(data, &b)
				sealed := ""
				if pass != nil {
					sealed = ", encrypted"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes%s): cluster %s at revision %d, read on %s\n",
					file, len(contents), sealed, b.GetClusterId(), b.GetState().GetRevision(), b.GetNodeId())
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "file to write (created or replaced with mode 0600)")
	cmd.Flags().StringVar(&passFile, "passphrase-file", "", "encrypt the backup with the passphrase on this file's first line (scrypt, AES-256-GCM)")
	return cmd
}
