package policy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	validator "github.com/projectcalico/calico/libcalico-go/lib/validator/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func u8(v uint8) *uint8 { return &v }

func secretRef(name, key string) *v1alpha1.BGPPassword {
	return &v1alpha1.BGPPassword{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
}

func TestValidateBGPPeerSettings(t *testing.T) {
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	tests := []struct {
		name string
		s    v1alpha1.BGPPeerSettings
		want []string // "field: substring" of each expected error, in order; none when valid
	}{
		{"empty", v1alpha1.BGPPeerSettings{}, nil},
		{"all settings", v1alpha1.BGPPeerSettings{Password: secretRef("bgp-secrets", "rr-password"), MaxRestartTime: dur(5 * time.Minute),
			TTLSecurity: u8(1), Filters: []string{"export-pods", "no.default"}, SourceAddress: v1alpha1.SourceAddressNone}, nil},
		{"ttl security off", v1alpha1.BGPPeerSettings{TTLSecurity: u8(0)}, nil},
		{"restart time at the limit", v1alpha1.BGPPeerSettings{MaxRestartTime: dur(4095 * time.Second)}, nil},
		{"restart time zero", v1alpha1.BGPPeerSettings{MaxRestartTime: dur(0)}, nil},
		{"restart time above the capability", v1alpha1.BGPPeerSettings{MaxRestartTime: dur(4096 * time.Second)},
			[]string{`spec.bgpPeer.maxRestartTime: Invalid value: "1h8m16s": must be between 0s and 4095s`}},
		{"negative restart time", v1alpha1.BGPPeerSettings{MaxRestartTime: dur(-time.Second)},
			[]string{`spec.bgpPeer.maxRestartTime: Invalid value: "-1s": must be between 0s and 4095s`}},
		{"password without a secret", v1alpha1.BGPPeerSettings{Password: &v1alpha1.BGPPassword{}},
			[]string{"spec.bgpPeer.password.secretKeyRef: Required value: a password comes from a Secret's key"}},
		{"secret without name and key", v1alpha1.BGPPeerSettings{Password: secretRef("", "")},
			[]string{"spec.bgpPeer.password.secretKeyRef.name: Required value", "spec.bgpPeer.password.secretKeyRef.key: Required value"}},
		{"bad secret name and key", v1alpha1.BGPPeerSettings{Password: secretRef("BGP_Secrets", "a/b")},
			[]string{`spec.bgpPeer.password.secretKeyRef.name: Invalid value: "BGP_Secrets": a lowercase RFC 1123 subdomain`,
				`spec.bgpPeer.password.secretKeyRef.key: Invalid value: "a/b": a valid config key`}},
		{"bad filter names (Calico)", v1alpha1.BGPPeerSettings{Filters: []string{"ok", "Not_A_Name", ""}},
			[]string{`spec.bgpPeer.filters[1]: Invalid value: "Not_A_Name": must name a BGPFilter`,
				`spec.bgpPeer.filters[2]: Invalid value: "": must name a BGPFilter`}},
		{"unknown source address (Calico)", v1alpha1.BGPPeerSettings{SourceAddress: "NodeIP"},
			[]string{`spec.bgpPeer.sourceAddress: Invalid value: "NodeIP": must be UseNodeIP or None (Calico's validator`}},
		{"reachableBy without a peerIP (Calico)", v1alpha1.BGPPeerSettings{ReachableBy: "10.0.0.1"},
			[]string{`spec.bgpPeer.reachableBy: Invalid value: "10.0.0.1": Calico's validator: ReachablyBy field must be empty when PeerIP is empty: the BGPPeers a policy writes select their peers`}},
		{"reachableBy not an address (Calico)", v1alpha1.BGPPeerSettings{ReachableBy: "gw"},
			[]string{`spec.bgpPeer.reachableBy: Invalid value: "gw": must be an IP address (Calico's validator`,
				`spec.bgpPeer.reachableBy: Invalid value: "gw": Calico's validator: ReachablyBy field must be empty when PeerIP is empty`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Default("test")
			p.Spec.BGPPeer = &tt.s
			errs := Validate(p)
			require.Len(t, errs, len(tt.want), "errors: %v", errs)
			for i, want := range tt.want {
				f, msg, _ := strings.Cut(want, ": ")
				assert.Equal(t, f, errs[i].Field, "error %d: %v", i, errs[i])
				assert.Contains(t, errs[i].Error(), msg)
			}
		})
	}
}

// The settings resolve into Calico's types 1:1: the BGPPeerSpec serializes each of them under the
// same name with the same value as spec.bgpPeer, and nothing else.
func TestResolveBGPPeerSettings(t *testing.T) {
	p := Default("test")
	assert.Equal(t, apiv3.BGPPeerSpec{}, MustResolve(p).BGPPeer, "no settings: the zero spec")
	p.Spec.BGPPeer = &v1alpha1.BGPPeerSettings{Password: secretRef("bgp-secrets", "rr"), MaxRestartTime: &metav1.Duration{Duration: 300 * time.Second},
		TTLSecurity: u8(2), Filters: []string{"f1", "f2"}, SourceAddress: v1alpha1.SourceAddressUseNodeIP}
	r := MustResolve(p)
	want, err := json.Marshal(p.Spec.BGPPeer)
	require.NoError(t, err)
	got, err := json.Marshal(r.BGPPeer)
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(got))
	// Copies: changing the policy afterwards does not change the resolved settings.
	p.Spec.BGPPeer.Filters[0] = "changed"
	*p.Spec.BGPPeer.TTLSecurity = 9
	p.Spec.BGPPeer.Password.SecretKeyRef.Key = "changed"
	assert.Equal(t, []string{"f1", "f2"}, r.BGPPeer.Filters)
	assert.EqualValues(t, 2, *r.BGPPeer.TTLSecurity)
	assert.Equal(t, "rr", r.BGPPeer.Password.SecretKeyRef.Key)
}

// FuzzValidateBGPPeerSettings: any spec.bgpPeer either is refused with errors under spec.bgpPeer
// only, or resolves into settings that Calico's validator accepts on a BGPPeer as the product
// writes it, with the same JSON as the policy's.
func FuzzValidateBGPPeerSettings(f *testing.F) {
	f.Add("bgp-secrets", "password", int64(300), uint8(1), true, "f1,f2", "UseNodeIP", "")
	f.Add("", "", int64(-1), uint8(0), false, "", "", "10.0.0.1")
	f.Add("a.b", "x/y", int64(5000), uint8(255), true, "Bad,", "None", "::1")
	f.Fuzz(func(t *testing.T, name, key string, restartSeconds int64, ttl uint8, setTTL bool, filters, source, reachable string) {
		s := &v1alpha1.BGPPeerSettings{SourceAddress: v1alpha1.SourceAddress(source), ReachableBy: reachable}
		if name != "" || key != "" {
			s.Password = secretRef(name, key)
		}
		if restartSeconds != 0 {
			s.MaxRestartTime = &metav1.Duration{Duration: time.Duration(restartSeconds) * time.Second}
		}
		if setTTL {
			s.TTLSecurity = &ttl
		}
		if filters != "" {
			s.Filters = strings.Split(filters, ",")
		}
		p := Default("fuzz")
		p.Spec.BGPPeer = s
		r, errs := Resolve(p)
		if len(errs) > 0 {
			for _, e := range errs {
				require.Truef(t, strings.HasPrefix(e.Field, "spec.bgpPeer"), "error outside spec.bgpPeer: %v", e)
			}
			return
		}
		spec := r.BGPPeer
		spec.NodeSelector, spec.PeerSelector = "has(routereflector.io/peering-set)", "routereflector.io/rr-id in {'a', 'b'}"
		require.NoError(t, validator.Validate(&apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: spec}), "settings accepted that Calico refuses: %+v", s)
		want, _ := json.Marshal(s)
		got, _ := json.Marshal(r.BGPPeer)
		require.JSONEq(t, string(want), string(got))
		require.Falsef(t, s.MaxRestartTime != nil && s.MaxRestartTime.Duration > MaxRestartTimeLimit, "restart time %v accepted", s.MaxRestartTime)
	})
}
