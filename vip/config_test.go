package vip

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaultsAndErrors(t *testing.T) {
	base := func() Config {
		return Config{NodeID: "n1", Interface: "eth0", HeartbeatAddr: "192.0.2.11:7946"}
	}
	peer := BGPPeer{Address: "192.0.2.1", ASN: 64512}
	tests := []struct {
		name string
		edit func(*Config)
		want string // "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"bgp only", func(c *Config) { c.Interface = ""; c.BGP = &BGPConfig{ASN: 65001, Peers: []BGPPeer{peer}} }, ""},
		{"neither arp nor bgp", func(c *Config) { c.Interface = "" }, "set --vip-interface"},
		{"no node id", func(c *Config) { c.NodeID = "" }, "node id"},
		{"heartbeat address", func(c *Config) { c.HeartbeatAddr = "0.0.0.0:7946" }, "--heartbeat-addr"},
		{"interval", func(c *Config) { c.HeartbeatInterval = time.Microsecond }, "--heartbeat-interval"},
		{"misses", func(c *Config) { c.HeartbeatMisses = 1 }, "--heartbeat-misses"},
		{"asn", func(c *Config) { c.BGP = &BGPConfig{Peers: []BGPPeer{peer}} }, "bgp.asn"},
		{"router id from an IPv6 heartbeat", func(c *Config) {
			c.HeartbeatAddr = "[2001:db8::11]:7946"
			c.BGP = &BGPConfig{ASN: 65001, Peers: []BGPPeer{peer}}
		}, "bgp.router-id"},
		{"no peers", func(c *Config) { c.BGP = &BGPConfig{ASN: 65001} }, "bgp.peers: list at least one"},
		{"peer address", func(c *Config) { c.BGP = &BGPConfig{ASN: 65001, Peers: []BGPPeer{{Address: "router", ASN: 1}}} }, "bgp.peers[0].address"},
		{"peer twice", func(c *Config) { c.BGP = &BGPConfig{ASN: 65001, Peers: []BGPPeer{peer, peer}} }, "bgp.peers[1].address: 192.0.2.1 is listed twice"},
		{"peer asn", func(c *Config) { c.BGP = &BGPConfig{ASN: 65001, Peers: []BGPPeer{{Address: "192.0.2.1"}}} }, "bgp.peers[0].asn"},
		{"bfd interval", func(c *Config) {
			c.BGP = &BGPConfig{ASN: 65001, Peers: []BGPPeer{{Address: "192.0.2.1", ASN: 1, BFD: &BFDConfig{Enabled: true, MinTx: Duration(time.Millisecond)}}}}
		}, "bgp.peers[0].bfd.min-tx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.edit(&c)
			got, err := c.withDefaults()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got.HeartbeatInterval != DefaultHeartbeatInterval || got.HeartbeatMisses != DefaultHeartbeatMisses {
					t.Errorf("defaults not applied: %+v", got)
				}
				if got.BGP != nil && (got.BGP.RouterID != "192.0.2.11" || got.BGP.Interface != "lo" || got.BGP.Peers[0].Port != 179) {
					t.Errorf("bgp defaults not applied: %+v", got.BGP)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrConfig naming %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestBGPConfigFromJSON(t *testing.T) {
	var b BGPConfig
	err := json.Unmarshal([]byte(`{"asn": 65001, "withdraw-grace": "250ms",
		"peers": [{"address": "192.0.2.1", "asn": 64512, "bfd": {"enabled": true, "min-tx": "50ms", "min-rx": "50ms"}}]}`), &b)
	if err != nil {
		t.Fatal(err)
	}
	if b.WithdrawGrace != Duration(250*time.Millisecond) || b.Peers[0].BFD.MinTx != Duration(50*time.Millisecond) || b.Peers[0].BFD.MinRx != Duration(50*time.Millisecond) {
		t.Errorf("decoded %+v %+v", b, b.Peers[0].BFD)
	}
	if err := json.Unmarshal([]byte(`{"withdraw-grace": "soon"}`), &b); err == nil || !strings.Contains(err.Error(), "duration") {
		t.Errorf("bad duration: err = %v", err)
	}
	// A bare number is refused for want of a unit, as on the command line.
	if err := json.Unmarshal([]byte(`{"withdraw-grace": 30}`), &b); err == nil || !strings.Contains(err.Error(), "30 has no unit; write 30s") {
		t.Errorf("a duration without a unit: err = %v", err)
	}
}
