package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// EdgePolicy is a Gateway API policy (direct policy attachment, GEP-2648)
// of teapot-lb's: the source ranges, rate limit and web application
// firewall of the Gateways and HTTPRoutes (or GRPCRoutes) it targets in
// its own namespace. The agent reads it from the edgepolicies.teapot-lb.io
// CRD (packaging/k8s/15-edgepolicy-crd.yaml) and writes its status: one
// ancestor per Gateway it reaches, with an Accepted condition.
type EdgePolicy struct {
	Namespace, Name string
	Generation      int64
	Created         metav1.Time
	Spec            EdgePolicySpec
	// Invalid says why the object could not be read as an EdgePolicy
	// ("" when it could); such a policy is not applied.
	Invalid string
}

// Group, version and kind of EdgePolicy.
const (
	EdgePolicyGroup    = "teapot-lb.io"
	EdgePolicyVersion  = "v1alpha1"
	EdgePolicyKind     = "EdgePolicy"
	EdgePolicyResource = "edgepolicies"
	// MaxEdgePolicyTargets bounds spec.targetRefs (the CRD says the same).
	MaxEdgePolicyTargets = 16
)

// EdgePolicySpec is what a tenant declares.
type EdgePolicySpec struct {
	TargetRefs []PolicyTargetRef `json:"targetRefs"`
	// AllowedSources and DeniedSources (Gateway targets only) become every
	// LB listener's allowedSources and deniedSources.
	AllowedSources []string `json:"allowedSources,omitempty"`
	DeniedSources  []string `json:"deniedSources,omitempty"`
	// RateLimit: on a Gateway, each http and https listener's requests
	// per second and every listener's new connections per second; on a
	// route, the requests per second of each LB route it becomes.
	RateLimit *EdgeRateLimit `json:"rateLimit,omitempty"`
	// WAF: on a route, its LB routes; on a Gateway, every LB route of it
	// that a route's own policy does not set.
	WAF *EdgeWAF `json:"waf,omitempty"`
}

// PolicyTargetRef names a Gateway, HTTPRoute or GRPCRoute of the
// policy's namespace.
type PolicyTargetRef struct {
	Group       string `json:"group"`
	Kind        string `json:"kind"`
	Name        string `json:"name"`
	SectionName string `json:"sectionName,omitempty"`
}

// EdgeRateLimit is a RateLimit of the model.
type EdgeRateLimit struct {
	RequestsPerSecond    uint32 `json:"requestsPerSecond,omitempty"`
	ConnectionsPerSecond uint32 `json:"connectionsPerSecond,omitempty"`
	Burst                uint32 `json:"burst,omitempty"`
	Key                  string `json:"key,omitempty"`
	Header               string `json:"header,omitempty"`
}

// EdgeWAF is a WAF of the model.
type EdgeWAF struct {
	Mode          string `json:"mode"`
	ParanoiaLevel uint32 `json:"paranoiaLevel,omitempty"`
	MaxBodyBytes  uint32 `json:"maxBodyBytes,omitempty"`
	// ExcludeRules are Core Rule Set rule ids not run (false positives).
	ExcludeRules []uint32 `json:"excludeRules,omitempty"`
	// Rules are the tenant's own SecRule/SecAction lines (routes[].waf.rules).
	Rules []string `json:"rules,omitempty"`
}

// EdgePolicyLister lists the EdgePolicies of a namespace.
type EdgePolicyLister interface {
	EdgePolicies(namespace string) []*EdgePolicy
}

// DecodeEdgePolicy reads an EdgePolicy from its unstructured form; a spec
// that does not fit the types is kept as Invalid.
func DecodeEdgePolicy(obj map[string]any) *EdgePolicy {
	var m metav1.ObjectMeta
	if md, ok := obj["metadata"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(md, &m)
	}
	p := &EdgePolicy{Namespace: m.Namespace, Name: m.Name, Generation: m.Generation, Created: m.CreationTimestamp}
	spec, _ := obj["spec"].(map[string]any)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &p.Spec); err != nil {
		p.Invalid = "spec: " + boundText(err.Error(), 256)
	}
	return p
}

// Policy condition reasons (Gateway API's PolicyConditionReason).
const (
	PolicyReasonAccepted   = "Accepted"
	PolicyReasonInvalid    = "Invalid"
	PolicyReasonConflicted = "Conflicted"
	// PolicyReasonTargetNotFound: a sectionName names no listener of the
	// Gateway or no rule of the route.
	PolicyReasonTargetNotFound = "TargetNotFound"
)

// PolicyStatus is what one Gateway's translation says of a policy that
// reaches it (through the Gateway itself or a route attached to it).
type PolicyStatus struct {
	Namespace, Name string
	Accepted        metav1.Condition
}

// policyOrder orders a Gateway's policies: oldest first, then by name, the
// Gateway API's rule for conflicting policies.
func policyOrder(a, b *EdgePolicy) int {
	if c := a.Created.Compare(b.Created.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// policiesFor returns the policies of the Gateway's namespace that target
// the Gateway or the route (kind, name), whole or a section of it, oldest
// first.
func (g *gwBuild) policiesFor(kind, name string) []*EdgePolicy {
	if g.src.Gateway == nil || g.src.Gateway.EdgePolicies == nil {
		return nil
	}
	var out []*EdgePolicy
	for _, p := range g.src.Gateway.EdgePolicies.EdgePolicies(g.gw.Namespace) {
		if len(sectionsOf(p, kind, name)) > 0 {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, policyOrder)
	return out
}

// sectionsOf returns the sectionNames with which p targets (kind, name),
// "" for the whole object.
func sectionsOf(p *EdgePolicy, kind, name string) []string {
	var out []string
	for _, t := range p.Spec.TargetRefs {
		if t.Group == gatewayGroup && t.Kind == kind && t.Name == name && !slices.Contains(out, t.SectionName) {
			out = append(out, t.SectionName)
		}
	}
	return out
}

// edgePolicyStatus records a policy's condition for this Gateway; a refusal
// recorded earlier (another of its targets) is kept.
func (g *gwBuild) edgePolicyStatus(p *EdgePolicy, ok bool, reason, msg string) {
	c := cond("Accepted", ok, reason, boundText(msg, 1024), p.Generation)
	for i, s := range g.res.EdgePolicies {
		if s.Namespace == p.Namespace && s.Name == p.Name {
			if s.Accepted.Status == metav1.ConditionTrue {
				g.res.EdgePolicies[i].Accepted = c
			}
			return
		}
	}
	g.res.EdgePolicies = append(g.res.EdgePolicies, PolicyStatus{Namespace: p.Namespace, Name: p.Name, Accepted: c})
}

// checkPolicy says why a policy cannot apply to a target of kind ("" when
// it can).
func checkPolicy(p *EdgePolicy, kind string) string {
	if p.Invalid != "" {
		return p.Invalid
	}
	s := p.Spec
	if len(s.TargetRefs) > MaxEdgePolicyTargets {
		return fmt.Sprintf("spec.targetRefs has %d entries; at most %d", len(s.TargetRefs), MaxEdgePolicyTargets)
	}
	if kind != KindGateway && len(s.AllowedSources)+len(s.DeniedSources) > 0 {
		return fmt.Sprintf("spec.allowedSources and deniedSources apply to a Gateway's listeners, not to a %s: target the Gateway", kind)
	}
	if s.RateLimit == nil && s.WAF == nil && len(s.AllowedSources)+len(s.DeniedSources) == 0 {
		return "the policy sets nothing: give allowedSources, deniedSources, rateLimit or waf"
	}
	rt := &pb.Route{Waf: wafOf(s.WAF)}
	if rl := s.RateLimit; rl != nil {
		if kind != KindGateway && rl.ConnectionsPerSecond > 0 {
			return fmt.Sprintf("spec.rateLimit.connectionsPerSecond: a %s carries requests; put connectionsPerSecond on a policy targeting the Gateway", kind)
		}
		if rl.ConnectionsPerSecond > api.MaxRateLimit {
			return fmt.Sprintf("spec.rateLimit.connectionsPerSecond is %d; at most %d", rl.ConnectionsPerSecond, api.MaxRateLimit)
		}
		if rl.RequestsPerSecond > 0 || rl.ConnectionsPerSecond == 0 {
			rt.RateLimit = &pb.RateLimit{RequestsPerSecond: rl.RequestsPerSecond, Burst: rl.Burst, Key: rl.Key, Header: rl.Header}
		} else {
			// connectionsPerSecond alone: check the burst, key and header.
			rt.RateLimit = &pb.RateLimit{RequestsPerSecond: 1, Burst: rl.Burst, Key: rl.Key, Header: rl.Header}
		}
	}
	if errs := api.CheckRouteRateLimit("spec", rt); len(errs) > 0 {
		return errs[0].String()
	}
	return ""
}

func wafOf(w *EdgeWAF) *pb.WAF {
	if w == nil {
		return nil
	}
	return &pb.WAF{Mode: w.Mode, ParanoiaLevel: w.ParanoiaLevel, MaxBodyBytes: w.MaxBodyBytes, ExcludeRules: slices.Clone(w.ExcludeRules), Rules: slices.Clone(w.Rules)}
}

func rateOf(rl *EdgeRateLimit, rps, conns uint32) *pb.RateLimit {
	if rps == 0 && conns == 0 {
		return nil
	}
	return &pb.RateLimit{RequestsPerSecond: rps, ConnectionsPerSecond: conns, Burst: rl.Burst, Key: rl.Key, Header: rl.Header}
}

// pickPolicy returns the policy of a target (section "": the whole
// object) that applies: the oldest valid one for which fits says ""
// (fits may be nil); the others are refused (invalid, or conflicted by
// it).
func (g *gwBuild) pickPolicy(kind, name, section string, fits func(*EdgePolicy) string) *EdgePolicy {
	what := kind + " " + name
	if section != "" {
		what += " sectionName " + section
	}
	var won *EdgePolicy
	for _, p := range g.policiesFor(kind, name) {
		if !slices.Contains(sectionsOf(p, kind, name), section) {
			continue
		}
		bad := checkPolicy(p, kind)
		if bad == "" && fits != nil {
			bad = fits(p)
		}
		if bad != "" {
			g.edgePolicyStatus(p, false, PolicyReasonInvalid, bad)
			continue
		}
		if won != nil {
			g.edgePolicyStatus(p, false, PolicyReasonConflicted, fmt.Sprintf("EdgePolicy %s, older, already targets %s; one policy applies to a target", won.Name, what))
			continue
		}
		won = p
		g.edgePolicyStatus(p, true, PolicyReasonAccepted, fmt.Sprintf("applied to %s %s/%s", kind, g.gw.Namespace, strings.TrimPrefix(what, kind+" ")))
	}
	return won
}

// sections returns the sectionNames the policies reaching (kind, name)
// target it with, sorted, without "".
func (g *gwBuild) sections(kind, name string) []string {
	var out []string
	for _, p := range g.policiesFor(kind, name) {
		for _, s := range sectionsOf(p, kind, name) {
			if s != "" {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sectionNotFound refuses the policies that target a section the object
// does not have.
func (g *gwBuild) sectionNotFound(kind, name, section, has string) {
	for _, p := range g.policiesFor(kind, name) {
		if slices.Contains(sectionsOf(p, kind, name), section) {
			g.edgePolicyStatus(p, false, PolicyReasonTargetNotFound,
				fmt.Sprintf("spec.targetRefs: %s %s has no %s named %s; name one it has, or leave sectionName out to target all of it", kind, name, has, boundText(section, 64)))
		}
	}
}

// edgeRoutePolicy applies the policies targeting route r to the LB routes
// its rules became: the route's own, then for each rule the one that
// targets it by name (sectionName), which replaces what it sets.
func (g *gwBuild) edgeRoutePolicy(r *routeObj, rules []*pb.Route) {
	if r.key.Namespace != g.gw.Namespace {
		return // a policy targets objects of its own namespace
	}
	whole := g.pickPolicy(r.key.Kind, r.key.Name, "", nil)
	names := r.ruleNames()
	bySection := make([]*EdgePolicy, len(rules))
	for _, s := range g.sections(r.key.Kind, r.key.Name) {
		i := slices.Index(names, s)
		if i < 0 || i >= len(rules) {
			g.sectionNotFound(r.key.Kind, r.key.Name, s, "rule")
			continue
		}
		bySection[i] = g.pickPolicy(r.key.Kind, r.key.Name, s, nil)
	}
	for i, rt := range rules {
		for _, p := range []*EdgePolicy{whole, bySection[i]} {
			if p == nil {
				continue
			}
			if p.Spec.WAF != nil {
				rt.Waf = wafOf(p.Spec.WAF)
			}
			if rl := p.Spec.RateLimit; rl != nil {
				rt.RateLimit = rateOf(rl, rl.RequestsPerSecond, 0)
			}
		}
	}
}

// ruleNames returns the names of r's rules, in order ("" for a rule
// without one).
func (r *routeObj) ruleNames() []string {
	var out []string
	if r.http != nil {
		for _, rule := range r.http.Spec.Rules {
			out = append(out, sectionName(rule.Name))
		}
	}
	if r.grpc != nil {
		for _, rule := range r.grpc.Spec.Rules {
			out = append(out, sectionName(rule.Name))
		}
	}
	return out
}

func sectionName(n *gwv1.SectionName) string {
	if n == nil {
		return ""
	}
	return string(*n)
}

// PolicyAncestor is the ancestorRef of a Gateway in a policy's status.
func PolicyAncestor(namespace, name string) gwv1.ParentReference {
	group := gwv1.Group(gatewayGroup)
	kind := gwv1.Kind(KindGateway)
	ns := gwv1.Namespace(namespace)
	return gwv1.ParentReference{Group: &group, Kind: &kind, Namespace: &ns, Name: gwv1.ObjectName(name)}
}
