package api

import (
	"fmt"
	"sort"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Kind names as stored in ObjectRef.Kind and written in manifests.
const (
	KindTenant       = "Tenant"
	KindVIPPool      = "VIPPool"
	KindLoadBalancer = "LoadBalancer"
	KindNode         = "Node"
	KindCertificate  = "Certificate"
	KindJoinToken    = "JoinToken"
	KindStorageItem  = "StorageItem"
	KindStorageLock  = "StorageLock"
)

// kindAliases maps the lower-case names a user may type to a kind.
var kindAliases = map[string]string{
	"tenant": KindTenant, "tenants": KindTenant,
	"vippool": KindVIPPool, "vippools": KindVIPPool, "pool": KindVIPPool, "pools": KindVIPPool,
	"loadbalancer": KindLoadBalancer, "loadbalancers": KindLoadBalancer, "lb": KindLoadBalancer, "lbs": KindLoadBalancer,
	"node": KindNode, "nodes": KindNode,
	"certificate": KindCertificate, "certificates": KindCertificate, "cert": KindCertificate, "certs": KindCertificate,
}

// ParseKind turns a user-typed kind ("lb", "pool", "VIPPool") into a Kind.
func ParseKind(s string) (string, error) {
	if k, ok := kindAliases[strings.ToLower(s)]; ok {
		return k, nil
	}
	names := make([]string, 0, len(kindAliases))
	for n := range kindAliases {
		if !strings.HasSuffix(n, "s") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return "", fmt.Errorf("unknown kind %s (known: %s)", Excerpt(s), strings.Join(names, ", "))
}

// Namespaced reports whether objects of kind belong to a tenant.
func Namespaced(kind string) bool {
	return kind == KindLoadBalancer || kind == KindCertificate
}

// Wrap puts a model message into an Object. It panics on a type that is not
// part of the model, which is a programming error.
func Wrap(m any) *pb.Object {
	switch v := m.(type) {
	case *pb.Tenant:
		return &pb.Object{Kind: &pb.Object_Tenant{Tenant: v}}
	case *pb.VIPPool:
		return &pb.Object{Kind: &pb.Object_VipPool{VipPool: v}}
	case *pb.LoadBalancer:
		return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: v}}
	case *pb.Node:
		return &pb.Object{Kind: &pb.Object_Node{Node: v}}
	case *pb.Certificate:
		return &pb.Object{Kind: &pb.Object_Certificate{Certificate: v}}
	case *pb.JoinToken:
		return &pb.Object{Kind: &pb.Object_JoinToken{JoinToken: v}}
	case *pb.StorageItem:
		return &pb.Object{Kind: &pb.Object_StorageItem{StorageItem: v}}
	case *pb.StorageLock:
		return &pb.Object{Kind: &pb.Object_StorageLock{StorageLock: v}}
	}
	panic(fmt.Sprintf("api.Wrap: %T is not a model object", m))
}

// Unwrap returns the model message inside o, or nil.
func Unwrap(o *pb.Object) any {
	switch v := o.GetKind().(type) {
	case *pb.Object_Tenant:
		return v.Tenant
	case *pb.Object_VipPool:
		return v.VipPool
	case *pb.Object_LoadBalancer:
		return v.LoadBalancer
	case *pb.Object_Node:
		return v.Node
	case *pb.Object_Certificate:
		return v.Certificate
	case *pb.Object_JoinToken:
		return v.JoinToken
	case *pb.Object_StorageItem:
		return v.StorageItem
	case *pb.Object_StorageLock:
		return v.StorageLock
	}
	return nil
}

// RefOf names the object inside o; Kind is empty for an empty Object.
func RefOf(o *pb.Object) *pb.ObjectRef {
	switch v := o.GetKind().(type) {
	case *pb.Object_Tenant:
		return &pb.ObjectRef{Kind: KindTenant, Name: v.Tenant.GetName()}
	case *pb.Object_VipPool:
		return &pb.ObjectRef{Kind: KindVIPPool, Name: v.VipPool.GetName()}
	case *pb.Object_LoadBalancer:
		return &pb.ObjectRef{Kind: KindLoadBalancer, Tenant: v.LoadBalancer.GetTenant(), Name: v.LoadBalancer.GetName()}
	case *pb.Object_Node:
		return &pb.ObjectRef{Kind: KindNode, Name: v.Node.GetId()}
	case *pb.Object_Certificate:
		return &pb.ObjectRef{Kind: KindCertificate, Tenant: v.Certificate.GetTenant(), Name: v.Certificate.GetName()}
	case *pb.Object_JoinToken:
		return &pb.ObjectRef{Kind: KindJoinToken, Name: v.JoinToken.GetId()}
	case *pb.Object_StorageItem:
		return &pb.ObjectRef{Kind: KindStorageItem, Name: v.StorageItem.GetKey()}
	case *pb.Object_StorageLock:
		return &pb.ObjectRef{Kind: KindStorageLock, Name: v.StorageLock.GetName()}
	}
	return &pb.ObjectRef{}
}

// RefString renders a reference for messages: "LoadBalancer acme/shop".
func RefString(r *pb.ObjectRef) string {
	if r.GetTenant() != "" {
		return r.GetKind() + " " + r.GetTenant() + "/" + r.GetName()
	}
	return r.GetKind() + " " + r.GetName()
}

// MetaOf returns the Meta of the object inside o (nil if unset).
func MetaOf(o *pb.Object) *pb.Meta {
	type hasMeta interface{ GetMeta() *pb.Meta }
	if m, ok := Unwrap(o).(hasMeta); ok {
		return m.GetMeta()
	}
	return nil
}

// Name prefixes of the load balancers the tenant agent derives from the
// objects of a tenant's cluster ("svc-NAMESPACE-NAME"); the operator's own
// load balancers do not carry them.
const (
	AgentServicePrefix = "svc-"
	AgentIngressPrefix = "ing-"
	AgentGatewayPrefix = "gw-"
)

// AgentKind returns the Kubernetes kind ("Service", "Ingress", "Gateway") a load
// balancer named name was derived from by the tenant agent, or "" for a
// load balancer the operator wrote.
func AgentKind(name string) string {
	switch {
	case strings.HasPrefix(name, AgentServicePrefix):
		return "Service"
	case strings.HasPrefix(name, AgentIngressPrefix):
		return "Ingress"
	case strings.HasPrefix(name, AgentGatewayPrefix):
		return "Gateway"
	}
	return ""
}
