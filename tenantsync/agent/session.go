package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// Files of the credentials directory (the keys of the Secret printed by
// teapot-lb tenant credentials).
const (
	fileTenant  = "tenant"
	fileServers = "servers"
	fileCA      = "ca.crt"
	fileCert    = "tls.crt"
	fileKey     = "tls.key"
)

// silence is how long a stream may carry nothing before the agent takes
// the host for gone (the server sends a heartbeat every 10s).
const silence = 35 * time.Second

// agentCreds are read from the mounted Secret at every connection, so a
// rotated Secret is picked up without a restart.
type agentCreds struct {
	tenant  string
	servers []string
	tls     *tlsFiles
}

type tlsFiles struct{ ca, cert, key []byte }

func loadCredentials(dir, servers string) (*agentCreds, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("credentials: %w (mount the Secret from teapot-lb tenant credentials at --credentials)", err)
		}
		return b, nil
	}
	c := &agentCreds{tls: &tlsFiles{}}
	var err error
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{fileCA, &c.tls.ca}, {fileCert, &c.tls.cert}, {fileKey, &c.tls.key}} {
		if *f.dst, err = read(f.name); err != nil {
			return nil, err
		}
	}
	if t, err := read(fileTenant); err == nil {
		c.tenant = strings.TrimSpace(string(t))
	}
	if servers == "" {
		b, err := read(fileServers)
		if err != nil {
			return nil, err
		}
		servers = string(b)
	}
	for _, s := range strings.Split(servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if _, _, err := net.SplitHostPort(s); err != nil {
				return nil, fmt.Errorf("server address %q: want HOST:PORT", s)
			}
			c.servers = append(c.servers, s)
		}
	}
	if len(c.servers) == 0 {
		return nil, errors.New("credentials: no LB server addresses (the Secret's servers key, or --servers)")
	}
	return c, nil
}

// dial prepares a connection that tries the servers in order.
func (c *agentCreds) dial() (*grpc.ClientConn, error) {
	cfg, err := pki.ClientTLS(c.tls.ca, c.tls.cert, c.tls.key)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	addrs := make([]resolver.Address, len(c.servers))
	for i, s := range c.servers {
		addrs[i] = resolver.Address{Addr: s}
	}
	r := manual.NewBuilderWithScheme("teapot-lb-agent")
	r.InitialState(resolver.State{Addresses: addrs})
	return grpc.NewClient(r.Scheme()+":///lb",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"pick_first": {}}]}`),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
	)
}

// session is one stream to the LB cluster.
type session struct {
	a        *Agent
	stream   pb.TenantSync_SyncClient
	sent     map[string]string // name -> version the cluster has or was sent
	seq      uint64
	maxBatch int
}

// runSession opens a stream and serves it until it breaks or ctx ends.
func (a *Agent) runSession(ctx context.Context) error {
	creds, err := loadCredentials(a.cfg.Credentials, a.cfg.Servers)
	if err != nil {
		return err
	}
	cc, err := creds.dial()
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stream, err := pb.NewTenantSyncClient(cc).Sync(ctx)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	if err := stream.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Hello{Hello: &pb.SyncHello{Agent: a.cfg.Identity, Version: a.cfg.Version}}}); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	// A host that takes the hello but never answers is given up on.
	noWelcome := time.AfterFunc(silence, func() { cancel(fmt.Errorf("no welcome within %s", silence)) })
	first, err := stream.Recv()
	noWelcome.Stop()
	if err != nil {
		return fmt.Errorf("wait for welcome: %w", cmpCause(ctx, err))
	}
	w := first.GetWelcome()
	if w == nil {
		return errors.New("the LB cluster did not answer with a welcome")
	}
	s := &session{a: a, stream: stream, sent: map[string]string{}, maxBatch: int(w.GetMaxBatch())}
	if s.maxBatch <= 0 {
		s.maxBatch = tenantsync.DefaultMaxBatch
	}
	for _, o := range w.GetObjects() {
		s.sent[o.GetName()] = o.GetVersion()
	}
	a.setTenant(w.GetTenant())
	a.book.reset(w.GetObjects())
	a.health.connected.Store(true)
	defer a.health.connected.Store(false)
	a.log.Info("connected to the LB cluster", "tenant", w.GetTenant().GetName(), "objects", len(w.GetObjects()), "revision", w.GetRevision())

	msgs := make(chan *pb.SyncResponse, 64)
	go func() {
		defer close(msgs)
		for {
			m, err := stream.Recv()
			if err != nil {
				cancel(err)
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()

	a.recompute()
	if err := s.sendDiff(true); err != nil {
		return err
	}
	quiet := time.NewTimer(silence)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			return ctx.Err()
		case <-quiet.C:
			return fmt.Errorf("the LB host sent nothing for %s", silence)
		case m, ok := <-msgs:
			if !ok {
				return context.Cause(ctx)
			}
			quiet.Reset(silence)
			s.receive(m)
		case <-a.set.notify:
			a.recompute()
			if err := s.sendDiff(false); err != nil {
				return err
			}
		}
	}
}

// cmpCause prefers the reason ctx was cancelled for over err.
func cmpCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// receive handles an ack or a status push.
func (s *session) receive(m *pb.SyncResponse) {
	switch {
	case m.GetAck() != nil:
		s.a.onStatus(m.GetAck().GetResults())
	case m.GetStatus() != nil:
		st := m.GetStatus()
		if st.GetTenant() != nil {
			s.a.setTenant(st.GetTenant())
		}
		s.a.onStatus(st.GetObjects())
	}
}

// sendDiff sends what the cluster lacks, in changes of at most maxBatch
// objects. A resync ends with the marker and the names the agent has.
func (s *session) sendDiff(resync bool) error {
	want := s.a.set.versions()
	var ups []*pb.SyncUpsert
	var rms []string
	for name, d := range want {
		if s.sent[name] != d.Version {
			ups = append(ups, &pb.SyncUpsert{LoadBalancer: d.LB, Version: d.Version})
		}
	}
	for name := range s.sent {
		if want[name] == nil {
			rms = append(rms, name)
		}
	}
	slices.SortFunc(ups, func(a, b *pb.SyncUpsert) int {
		return strings.Compare(a.GetLoadBalancer().GetName(), b.GetLoadBalancer().GetName())
	})
	slices.Sort(rms)
	if len(ups) == 0 && len(rms) == 0 && !resync {
		return nil
	}
	for len(ups) > 0 || len(rms) > 0 || resync {
		ch := &pb.SyncChange{}
		n := min(len(rms), s.maxBatch)
		ch.Removals, rms = rms[:n], rms[n:]
		n = min(len(ups), s.maxBatch-len(ch.Removals))
		ch.Upserts, ups = ups[:n], ups[n:]
		if resync && len(ups) == 0 && len(rms) == 0 {
			ch.ResyncEnd = true
			for name := range want {
				ch.Keep = append(ch.Keep, name)
			}
			slices.Sort(ch.Keep)
			resync = false
		}
		s.seq++
		ch.Seq = s.seq
		if err := s.stream.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
			return fmt.Errorf("send change %d: %w", ch.Seq, err)
		}
		for _, u := range ch.Upserts {
			s.sent[u.GetLoadBalancer().GetName()] = u.GetVersion()
		}
		for _, r := range ch.Removals {
			delete(s.sent, r)
		}
		s.a.metrics.changesSent.Add(1)
		s.a.metrics.objectsSent.Add(uint64(len(ch.Upserts) + len(ch.Removals)))
	}
	return nil
}
