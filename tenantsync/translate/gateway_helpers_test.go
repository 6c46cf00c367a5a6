package translate_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwlisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"

	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// gwSources loads core objects into the fake clientset's listers and the
// Gateway API objects into indexers behind the Gateway API listers.
func gwSources(t *testing.T, core []runtime.Object, gw ...runtime.Object) translate.Sources {
	t.Helper()
	var coreObjs, nsObjs, secretObjs, cmObjs []runtime.Object
	for _, o := range core {
		switch o.(type) {
		case *corev1.Namespace:
			nsObjs = append(nsObjs, o)
		case *corev1.ConfigMap:
			cmObjs = append(cmObjs, o)
		case *corev1.Secret:
			secretObjs = append(secretObjs, o)
		default:
			coreObjs = append(coreObjs, o)
		}
	}
	src := sources(t, coreObjs...)
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	classes, gateways, https, grpcs, tlss, tcps, udps, grants, nss, secrets, lsets := idx(), idx(), idx(), idx(), idx(), idx(), idx(), idx(), idx(), idx(), idx()
	policies, cms := idx(), idx()
	for _, o := range cmObjs {
		_ = cms.Add(o)
	}
	for _, o := range nsObjs {
		_ = nss.Add(o)
	}
	for _, o := range secretObjs {
		_ = secrets.Add(o)
	}
	for _, o := range gw {
		var i cache.Indexer
		switch o.(type) {
		case *gwv1.GatewayClass:
			i = classes
		case *gwv1.Gateway:
			i = gateways
		case *gwv1.HTTPRoute:
			i = https
		case *gwv1.GRPCRoute:
			i = grpcs
		case *gwv1.TLSRoute:
			i = tlss
		case *gwv1.TCPRoute:
			i = tcps
		case *gwv1.UDPRoute:
			i = udps
		case *gwv1.ReferenceGrant:
			i = grants
		case *gwv1.ListenerSet:
			i = lsets
		case *gwv1.BackendTLSPolicy:
			i = policies
		default:
			t.Fatalf("gwSources: unexpected %T", o)
		}
		if err := i.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	src.Gateway = &translate.GatewaySources{
		Classes:         gwlisters.NewGatewayClassLister(classes),
		Gateways:        gwlisters.NewGatewayLister(gateways),
		HTTPRoutes:      gwlisters.NewHTTPRouteLister(https),
		GRPCRoutes:      gwlisters.NewGRPCRouteLister(grpcs),
		TLSRoutes:       gwlisters.NewTLSRouteLister(tlss),
		TCPRoutes:       gwlisters.NewTCPRouteLister(tcps),
		UDPRoutes:       gwlisters.NewUDPRouteLister(udps),
		ListenerSets:    gwlisters.NewListenerSetLister(lsets),
		ReferenceGrants: gwlisters.NewReferenceGrantLister(grants),
		Namespaces:      corelisters.NewNamespaceLister(nss),
		Secrets:         corelisters.NewSecretLister(secrets),

		BackendTLSPolicies: gwlisters.NewBackendTLSPolicyLister(policies),
		ConfigMaps:         corelisters.NewConfigMapLister(cms),
	}
	return src
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// meta names an object created sec seconds after epoch.
func meta(ns, name string, sec int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 3, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(sec) * time.Second))}
}

func gwClass(name, controller string) *gwv1.GatewayClass {
	return &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: gwv1.GatewayClassSpec{ControllerName: gwv1.GatewayController(controller)}}
}

func gateway(ns, name string, ls ...gwv1.Listener) *gwv1.Gateway {
	return &gwv1.Gateway{ObjectMeta: meta(ns, name, 0), Spec: gwv1.GatewaySpec{GatewayClassName: "teapot", Listeners: ls}}
}

func listener(name string, proto gwv1.ProtocolType, port int32, host string) gwv1.Listener {
	l := gwv1.Listener{Name: gwv1.SectionName(name), Protocol: proto, Port: port}
	if host != "" {
		h := gwv1.Hostname(host)
		l.Hostname = &h
	}
	return l
}

func parent(gw string, section string) gwv1.ParentReference {
	p := gwv1.ParentReference{Name: gwv1.ObjectName(gw)}
	if section != "" {
		s := gwv1.SectionName(section)
		p.SectionName = &s
	}
	return p
}

func bref(name string, port int32, weight *int32) gwv1.BackendRef {
	return gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: ptr(port)}, Weight: weight}
}

func httpRoute(ns, name string, sec int, parents []gwv1.ParentReference, hosts []string, rules ...gwv1.HTTPRouteRule) *gwv1.HTTPRoute {
	r := &gwv1.HTTPRoute{ObjectMeta: meta(ns, name, sec)}
	r.Spec.ParentRefs = parents
	for _, h := range hosts {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname(h))
	}
	r.Spec.Rules = rules
	return r
}

func httpBackends(refs ...gwv1.BackendRef) []gwv1.HTTPBackendRef {
	out := make([]gwv1.HTTPBackendRef, len(refs))
	for i, r := range refs {
		out[i] = gwv1.HTTPBackendRef{BackendRef: r}
	}
	return out
}

// nodePortSvc is a NodePort Service with one port.
func nodePortSvc(ns, name string, port, nodePort int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Name: "p", Port: port, NodePort: nodePort, Protocol: corev1.ProtocolTCP}}},
	}
}

// tlsSecret is a kubernetes.io/tls Secret with a fresh self-signed pair.
func tlsSecret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "shop.acme.example"}, DNSNames: []string{"shop.acme.example"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		},
	}
}

func grant(ns, fromKind, fromNS, toKind string) *gwv1.ReferenceGrant {
	return &gwv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "allow-" + fromNS},
		Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: gwv1.Kind(fromKind), Namespace: gwv1.Namespace(fromNS)}},
			To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: gwv1.Kind(toKind)}},
		},
	}
}

// condOf returns the condition of type typ, or a zero one.
func condOf(conds []metav1.Condition, typ string) metav1.Condition {
	for _, c := range conds {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}
