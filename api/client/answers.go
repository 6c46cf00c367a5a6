package client

import (
	"context"
	"fmt"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// WaitAnswers waits until the admin API at server answers a cluster
// status with the credentials of the admin config at path, or ctx ends.
// A host tells systemd it is ready only then.
func WaitAnswers(ctx context.Context, path, server string) error {
	cfg, err := LoadConfig(path)
	if err != nil {
		return err
	}
	conn, err := Dial(ctx, cfg, server)
	if err != nil {
		return err
	}
	defer conn.Close()
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := conn.Admin.ClusterStatus(cctx, &pb.ClusterStatusRequest{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the admin API at %s does not answer: %w", server, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
