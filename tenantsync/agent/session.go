package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
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
	a      *Agent
	stream pb.TenantSync_SyncClient
	sent   map[string]string // name -> version the cluster has or was sent
	// certs are the uploaded certificates' versions this stream sent.
	certs    map[string]string
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
	s := &session{a: a, stream: stream, sent: map[string]string{}, certs: map[string]string{}, maxBatch: int(w.GetMaxBatch())}
	if s.maxBatch <= 0 {
		s.maxBatch = syncspec.DefaultMaxBatch
	}
	held := make([]string, 0, len(w.GetObjects()))
	for _, o := range w.GetObjects() {
		s.sent[o.GetName()] = o.GetVersion()
		held = append(held, o.GetName())
	}
	a.set.hold(held)
	a.setFeatureLevel(w.GetFeatureLevel())
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

	start := time.Now()
	a.recompute()
	translated := time.Since(start)
	if err := s.sendDiff(true); err != nil {
		return err
	}
	a.log.Info("resync sent", "changes", s.seq, "translate", translated.Round(time.Millisecond), "send", (time.Since(start) - translated).Round(time.Millisecond))
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
		for _, c := range m.GetAck().GetCertificates() {
			if c.GetError() != "" {
				// Sent again with the next change; the load balancers that
				// list it are refused until then, which their status says.
				delete(s.certs, c.GetName())
				s.a.log.Warn("the LB cluster refused a certificate from a Secret", "certificate", c.GetName(), "err", c.GetError())
			}
		}
		s.a.onStatus(m.GetAck().GetResults())
	case m.GetStatus() != nil:
		st := m.GetStatus()
		if th := st.GetThrottled(); th != nil {
			s.a.onThrottle(th)
		}
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
	certUps, certRms, keepCerts := s.certDiff(want)
	if len(ups) == 0 && len(rms) == 0 && len(certUps) == 0 && len(certRms) == 0 && !resync {
		return nil
	}
	// Certificates go first (load balancers list them), their removals
	// last (once no load balancer lists them).
	for len(ups) > 0 || len(rms) > 0 || len(certUps) > 0 || len(certRms) > 0 || resync {
		ch := &pb.SyncChange{}
		n := min(len(certUps), s.maxBatch)
		ch.Certificates, certUps = certUps[:n], certUps[n:]
		room := s.maxBatch - n
		n = min(len(rms), room)
		ch.Removals, rms = rms[:n], rms[n:]
		room -= n
		n = min(len(ups), room)
		ch.Upserts, ups = ups[:n], ups[n:]
		room -= n
		if len(certUps) == 0 && len(ups) == 0 && len(rms) == 0 {
			n = min(len(certRms), room)
			ch.CertificateRemovals, certRms = certRms[:n], certRms[n:]
		}
		if resync && len(ups) == 0 && len(rms) == 0 && len(certUps) == 0 && len(certRms) == 0 {
			ch.ResyncEnd = true
			for name := range want {
				ch.Keep = append(ch.Keep, name)
			}
			slices.Sort(ch.Keep)
			ch.KeepCertificates = keepCerts
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
		for _, c := range ch.Certificates {
			s.certs[c.GetName()] = certVersion(c)
		}
		for _, r := range ch.CertificateRemovals {
			delete(s.certs, r)
		}
		s.a.metrics.changesSent.Add(1)
		s.a.metrics.objectsSent.Add(uint64(len(ch.Upserts) + len(ch.Removals)))
	}
	return nil
}

// certDiff reads the TLS Secrets the desired Gateways serve and returns
// the certificates to upload (new or changed since this stream sent
// them), those to remove, and the names of all it needs.
func (s *session) certDiff(want map[string]*translate.Desired) (ups []*pb.SyncCertificate, rms, keep []string) {
	need := map[string]translate.CertificateSource{}
	for _, d := range want {
		if d.Gateway == nil {
			continue
		}
		for _, c := range d.Gateway.Certificates {
			need[c.Name] = c
		}
	}
	var secrets corelisters.SecretLister
	if gs := s.a.src.Gateway; gs != nil {
		secrets = gs.Secrets
	}
	for name, c := range need {
		keep = append(keep, name)
		if secrets == nil {
			continue
		}
		sec, err := secrets.Secrets(c.Namespace).Get(c.Secret)
		if err != nil {
			continue // gone: the next translation drops it
		}
		sc := &pb.SyncCertificate{Name: name, CertPem: sec.Data[corev1.TLSCertKey], KeyPem: sec.Data[corev1.TLSPrivateKeyKey]}
		if s.certs[name] != certVersion(sc) {
			ups = append(ups, sc)
		}
	}
	for name := range s.certs {
		if _, ok := need[name]; !ok {
			rms = append(rms, name)
		}
	}
	slices.SortFunc(ups, func(a, b *pb.SyncCertificate) int { return strings.Compare(a.GetName(), b.GetName()) })
	slices.Sort(rms)
	slices.Sort(keep)
	return ups, rms, keep
}

// certVersion identifies a certificate's chain and key.
func certVersion(c *pb.SyncCertificate) string {
	h := sha256.New()
	h.Write(c.GetCertPem())
	h.Write([]byte{0})
	h.Write(c.GetKeyPem())
	return hex.EncodeToString(h.Sum(nil)[:8])
}
