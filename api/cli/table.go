package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer) *table {
	return &table{tw: tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)}
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

type field struct{ key, val string }

// writeFields writes key-value pairs as a JSON or YAML object.
func writeFields(w io.Writer, fields []field, format string) error {
	m := make(map[string]string, len(fields))
	for _, f := range fields {
		m[f.key] = f.val
	}
	var b []byte
	var err error
	if format == OutputJSON {
		b, err = json.MarshalIndent(m, "", "  ")
		b = append(b, '\n')
	} else {
		b, err = yaml.Marshal(m)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// age renders the time since t like kubectl does: "45s", "5m", "3h", "2d",
// "1y".
func age(now time.Time, t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	d := now.Sub(t.AsTime())
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 24*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	case d < 365*24*time.Hour:
		return strconv.Itoa(int(d.Hours()/24)) + "d"
	}
	return strconv.Itoa(int(d.Hours()/24/365)) + "y"
}

func list(s []string) string { return strings.Join(s, ",") }

// objectPath names an object in command output: "loadbalancer/acme/shop".
func objectPath(r *pb.ObjectRef) string {
	if r.GetTenant() != "" {
		return lower(r.GetKind()) + "/" + r.GetTenant() + "/" + r.GetName()
	}
	return lower(r.GetKind()) + "/" + r.GetName()
}

// writeTable writes objects of one kind as a table. lbs are all load
// balancers (for the counts of the tenant and pool tables); nil elsewhere.
// holders maps a VIP to the hosts holding it (load balancer table).
func (a *app) writeTable(w io.Writer, kind string, objs []*pb.Object, lbs []*pb.LoadBalancer, holders map[string]string) error {
	t := newTable(w)
	now := a.now()
	switch kind {
	case api.KindTenant:
		perTenant := map[string]int{}
		for _, lb := range lbs {
			perTenant[lb.GetTenant()]++
		}
		t.row("NAME", "DOMAINS", "NETWORKS", "POOLS", "LBS", "AGE")
		for _, o := range objs {
			v := o.GetTenant()
			count := strconv.Itoa(perTenant[v.GetName()]) + "/" + strconv.Itoa(int(api.EffectiveQuotas(v).GetLoadBalancers()))
			t.row(v.GetName(), list(v.GetDomains()), list(v.GetNetworks()), list(v.GetPools()), count, age(now, v.GetMeta().GetCreated()))
		}
	case api.KindVIPPool:
		t.row("NAME", "MODE", "CIDRS", "TENANTS", "USED", "AGE")
		for _, o := range objs {
			v := o.GetVipPool()
			tenants := list(v.GetTenants())
			if at := v.GetAttachment(); at != "" {
				tenants = at + " (in its attachment)"
			} else if tenants == "" {
				tenants = "*"
			}
			shared := ""
			if v.GetAllowShared() {
				shared = " (shared)"
			}
			t.row(v.GetName(), v.GetMode(), list(v.GetCidrs()), tenants, strconv.Itoa(used(v, lbs))+shared, age(now, v.GetMeta().GetCreated()))
		}
	case api.KindLoadBalancer:
		head := []string{"TENANT", "NAME", "STATUS", "ADDRESS", "HELD BY", "POOL", "LISTENERS", "ROUTES", "MEMBERS", "AGE"}
		var traffic map[string]*lbTraffic
		if a.output == OutputWide {
			// The last interval of the hosts' history rings (10 s), and
			// how long ago it ended.
			head = append(head, "REQ/S", "5XX", "P99", "CONNS", "TRAFFIC AGE", "REASON")
			traffic = trafficOf(a.observed)
		}
		t.row(head...)
		for _, o := range objs {
			v := o.GetLoadBalancer()
			addrs := api.StatusAddresses(v)
			addr := strings.Join(addrs, ",")
			if addr == "" {
				addr = "<pending>"
			}
			var held []string
			for _, a := range addrs {
				if h := holders[a]; h != "" && !slices.Contains(held, h) {
					held = append(held, h)
				}
			}
			var listeners []string
			for _, l := range v.GetListeners() {
				listeners = append(listeners, fmt.Sprintf("%d/%s", l.GetPort(), l.GetProtocol()))
			}
			members := 0
			for _, p := range v.GetPools() {
				members += len(p.GetMembers())
			}
			row := []string{v.GetTenant(), v.GetName(), orDash(v.GetStatus().GetObserved().GetPhase()), addr, orDash(strings.Join(held, ",")), v.GetVip().GetPool(), list(listeners),
				strconv.Itoa(len(v.GetRoutes())), strconv.Itoa(members), age(now, v.GetMeta().GetCreated())}
			if a.output == OutputWide {
				row = append(row, trafficCells(traffic[v.GetTenant()+"/"+v.GetName()], now)...)
				row = append(row, v.GetStatus().GetObserved().GetReason())
			}
			t.row(row...)
		}
	case api.KindNode:
		t.row("ID", "SUFFRAGE", "DRAINING", "RAFT ADDR", "API ADDR", "VIP INTERFACE", "AGE")
		for _, o := range objs {
			v := o.GetNode()
			t.row(v.GetId(), v.GetSuffrage(), yesNo(v.GetDraining()), v.GetRaftAddr(), v.GetApiAddr(), v.GetVipInterface(), age(now, v.GetMeta().GetCreated()))
		}
	case api.KindCertificate:
		t.row("TENANT", "NAME", "HOSTS", "SOURCE", "STATE", "NOT AFTER", "AGE")
		for _, o := range objs {
			v := o.GetCertificate()
			notAfter := ""
			if v.GetNotAfter() != nil {
				notAfter = v.GetNotAfter().AsTime().UTC().Format(time.DateOnly)
			}
			t.row(v.GetTenant(), v.GetName(), list(v.GetHosts()), v.GetSource(), v.GetState(), notAfter, age(now, v.GetMeta().GetCreated()))
		}
	default:
		return fmt.Errorf("no table for kind %s: use -o yaml", kind)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if kind == api.KindLoadBalancer && a.output == OutputWide {
		if err := writeMemberTraffic(w, objs, a.observed, now); err != nil {
			return err
		}
	}
	return writeProblems(w, objs)
}

// writeProblems lists what the cluster found wrong with load balancers,
// so that nobody has to guess why one has no address.
func writeProblems(w io.Writer, objs []*pb.Object) error {
	var rows [][]string
	for _, o := range objs {
		lb := o.GetLoadBalancer()
		for _, p := range lb.GetStatus().GetProblems() {
			rows = append(rows, []string{lb.GetTenant() + "/" + lb.GetName(), p.GetField(), p.GetReason()})
		}
		if p := api.FamilyProblem(lb); p != nil {
			rows = append(rows, []string{lb.GetTenant() + "/" + lb.GetName(), p.GetField(), p.GetReason()})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w)
	t.row("LOAD BALANCER", "FIELD", "PROBLEM")
	for _, r := range rows {
		t.row(r...)
	}
	return t.flush()
}

// used counts the distinct addresses of pool that load balancers hold.
func used(pool *pb.VIPPool, lbs []*pb.LoadBalancer) int {
	addrs := map[string]bool{}
	for _, lb := range lbs {
		for _, addr := range api.StatusAddresses(lb) {
			if at := pool.GetAttachment(); at != "" && lb.GetTenant() != at {
				continue // another tenant's address, in its own attachment
			}
			if lb.GetVip().GetPool() == pool.GetName() || (lb.GetVip().GetPool() == "" && inPool(pool, addr)) {
				addrs[addr] = true
			}
		}
	}
	return len(addrs)
}

// inPool reports whether addr lies in one of the pool's CIDRs or ranges.
func inPool(pool *pb.VIPPool, addr string) bool {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	for _, c := range pool.GetCidrs() {
		if lo, hi, ok := strings.Cut(c, "-"); ok {
			l, err1 := netip.ParseAddr(strings.TrimSpace(lo))
			h, err2 := netip.ParseAddr(strings.TrimSpace(hi))
			if err1 == nil && err2 == nil && ip.Compare(l) >= 0 && ip.Compare(h) <= 0 {
				return true
			}
			continue
		}
		if p, err := netip.ParsePrefix(c); err == nil && p.Contains(ip) {
			return true
		}
	}
	return false
}

// sortObjects orders objects by kind (in apply order), tenant and name.
func sortObjects(objs []*pb.Object) {
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := api.RefOf(objs[i]), api.RefOf(objs[j])
		if a.GetKind() != b.GetKind() {
			return kindRank(a.GetKind()) < kindRank(b.GetKind())
		}
		if a.GetTenant() != b.GetTenant() {
			return a.GetTenant() < b.GetTenant()
		}
		return a.GetName() < b.GetName()
	})
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
