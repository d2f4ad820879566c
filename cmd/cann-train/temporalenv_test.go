package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestTemporalEnvResolves: the client configuration's address and
// namespace count only where neither the flags nor TEMPORAL_ADDRESS /
// TEMPORAL_NAMESPACE say; its TLS and API key reach the dial options; one
// that cannot be read is an error naming the file and profile, raised
// when a command dials; --env-config=false ignores it all.
func TestTemporalEnvResolves(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, newTestPKI(t).caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "temporal.toml")
	if err := os.WriteFile(good, []byte(`[profile.default]
address = "profile.example:7233"
namespace = "ml"
[profile.default.tls]
server_ca_cert_path = "`+ca+`"
[profile.cloud]
address = "cloud.example:7233"
api_key = "secret"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[profile.default\naddress = 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name            string
		env             map[string]string
		args            []string
		address, ns     string
		tls, credential bool
		err             string // in clientOptions' error
	}{
		{name: "profile", address: "profile.example:7233", ns: "ml", tls: true},
		{name: "flags win", args: []string{"--address", "flag.example:1", "--namespace", "n"}, address: "flag.example:1", ns: "n", tls: true},
		{name: "variables win", env: map[string]string{"TEMPORAL_ADDRESS": "env.example:2", "TEMPORAL_NAMESPACE": "e"},
			address: "env.example:2", ns: "e", tls: true},
		{name: "api key profile", env: map[string]string{"TEMPORAL_PROFILE": "cloud"}, address: "cloud.example:7233", ns: "default",
			tls: true, credential: true},
		{name: "api key without TLS", env: map[string]string{"TEMPORAL_PROFILE": "cloud", "TEMPORAL_TLS": "false"},
			address: "cloud.example:7233", ns: "default", credential: true},
		{name: "off", args: []string{"--env-config=false"}, address: "127.0.0.1:7233", ns: "default"},
		{name: "no such profile", env: map[string]string{"TEMPORAL_PROFILE": "nope"}, err: `profile "nope" of ` + good},
		{name: "malformed file", env: map[string]string{"TEMPORAL_CONFIG_FILE": bad}, err: `profile "default" of ` + bad},
		{name: "a file that is not there", env: map[string]string{"TEMPORAL_CONFIG_FILE": filepath.Join(dir, "nope.toml")},
			err: "nope.toml: no such file"},
		{name: "malformed file ignored", env: map[string]string{"TEMPORAL_CONFIG_FILE": bad}, args: []string{"--env-config=false"},
			address: "127.0.0.1:7233", ns: "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TEMPORAL_CONFIG_FILE", good)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			e := &env{out: io.Discard, err: io.Discard}
			root := newRootCmd(e)
			if err := root.PersistentFlags().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			e.loadTemporalEnv(root.PersistentFlags())
			o, err := e.clientOptions(nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.Address != tc.address || o.Namespace != tc.ns || (o.Connection.ConnectionOptions.TLS != nil) != tc.tls ||
				(o.Connection.Credentials != nil) != tc.credential {
				t.Errorf("dials %s (namespace %s), TLS %v, credentials %v; want %s (%s), %v, %v", o.Address, o.Namespace,
					o.Connection.ConnectionOptions.TLS != nil, o.Connection.Credentials != nil, tc.address, tc.ns, tc.tls, tc.credential)
			}
		})
	}
}

// TestTemporalOverMutualTLS: node workers and the CLI reach a Temporal
// frontend that only speaks mutual TLS (here a TLS-terminating proxy in
// front of the embedded server, as an ingress is) through the
// standard client configuration alone — a temporal.toml profile with the
// CA and a client certificate, no --address —, and a run trains through
// it; a profile without the client certificate is refused by the server.
func TestTemporalOverMutualTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, l, addr := startInProcessControl(ctx, t, dir) // the control worker inside, on plain gRPC
	pki := newTestPKI(t)
	proxy := startTLSProxy(t, pki, addr)
	files := map[string][]byte{"ca.pem": pki.caPEM, "client.pem": pki.clientPEM, "client-key.pem": pki.clientKeyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "temporal.toml")
	profile := func(name string, cert bool) string {
		p := "[profile." + name + "]\naddress = \"" + proxy.addr + "\"\n[profile." + name + ".tls]\nserver_ca_cert_path = \"" + filepath.Join(dir, "ca.pem") + "\"\n"
		if cert {
			p += "client_cert_path = \"" + filepath.Join(dir, "client.pem") + "\"\nclient_key_path = \"" + filepath.Join(dir, "client-key.pem") + "\"\n"
		}
		return p
	}
	if err := os.WriteFile(conf, []byte(profile("mtls", true)+profile("nocert", false)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEMPORAL_CONFIG_FILE", conf)
	t.Setenv("TEMPORAL_PROFILE", "mtls")

	tl := newLauncher(dir)
	t.Cleanup(func() { _ = tl.StopAll(5 * time.Second) })
	if _, err := tl.Start("node-1", "worker", "node", "--id", "node-1", "--checkpoint-url", "file://"+filepath.Join(dir, "ckpt")); err != nil {
		t.Fatal(err)
	}
	waitRegistered(ctx, t, c, 1) // registered through the proxy: its only way in
	cli := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		return out.String() + errb.String(), err
	}
	out, err := cli("nodes")
	if err != nil || !strings.Contains(out, "node-1") {
		dumpLogs(t, l.LogDir)
		t.Fatalf("nodes over mutual TLS: %v\n%s", err, out)
	}
	job := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(job, []byte("name: tls\nnodes: 1\nsteps: 200\nchunk_steps: 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cli("run", "-f", job, "--wait"); err != nil || !strings.Contains(out, "completed") {
		dumpLogs(t, l.LogDir)
		t.Fatalf("a run over mutual TLS: %v\n%s", err, out)
	}
	if n := proxy.conns.Load(); n < 3 {
		t.Errorf("%d connection(s) through the proxy; want the node worker's and the CLI's", n)
	}

	t.Setenv("TEMPORAL_PROFILE", "nocert")
	out, err = cli("nodes")
	if err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("without a client certificate: %v\n%s; want a refused TLS dial", err, out)
	}
	t.Setenv("TEMPORAL_PROFILE", "missing")
	if _, err := cli("nodes"); err == nil || !strings.Contains(err.Error(), `profile "missing" of `+conf) {
		t.Errorf("a missing profile: %v", err)
	}
}

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, PEM-encoded.
type testPKI struct {
	caPEM, clientPEM, clientKeyPEM []byte
	server                         tls.Certificate
	pool                           *x509.CertPool
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cann-train test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "cann-train test"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	srvPEM, srvKeyPEM := issue(2, x509.ExtKeyUsageServerAuth)
	server, err := tls.X509KeyPair(srvPEM, srvKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), server: server, pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	p.clientPEM, p.clientKeyPEM = issue(3, x509.ExtKeyUsageClientAuth)
	return p
}

// tlsProxy terminates mutual TLS and forwards the bytes to a plain
// backend, as an ingress in front of a Temporal frontend does.
type tlsProxy struct {
	addr  string
	conns atomic.Int64
}

func startTLSProxy(t *testing.T, pki testPKI, backend string) *tlsProxy {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert,
		NextProtos: []string{"h2"}, // gRPC insists on ALPN
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &tlsProxy{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer in.Close()
				out, err := net.Dial("tcp", backend)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return p
}

// TestReachExport: a server on other ports than the ones this shell's
// commands dial (its address and Web UI as the flags, TEMPORAL_* and
// CANN_TRAIN_UI resolve them), or in another namespace than another
// terminal resolves (not this command's --namespace), gets the line that
// points other terminals at it; one they reach already gets none. A
// server bound to every interface also gets the line for other hosts, at
// this host's address, which its Web UI link uses too.
func TestReachExport(t *testing.T) {
	hostIP := func() net.IP { return net.ParseIP("10.77.0.1") }
	noIP := func() net.IP { return nil }
	for _, tc := range []struct {
		name               string
		ui, nsEnv          string // CANN_TRAIN_UI, TEMPORAL_NAMESPACE
		address, namespace string // this command's
		srv, srvNS, srvUI  string // the server's
		noHostIP           bool
		want, elsewhere    string
	}{
		{name: "defaults", address: "127.0.0.1:7233", namespace: "default", srv: "127.0.0.1:7233", srvNS: "default", srvUI: "http://127.0.0.1:8233"},
		{name: "free ports", address: "127.0.0.1:7233", namespace: "default", srv: "127.0.0.1:24067", srvNS: "default", srvUI: "http://127.0.0.1:29529",
			want: "export TEMPORAL_ADDRESS=127.0.0.1:24067 CANN_TRAIN_UI=http://127.0.0.1:29529"},
		{name: "dev --port 27841", address: "127.0.0.1:7233", namespace: "default", srv: "127.0.0.1:27841", srvNS: "default", srvUI: "http://127.0.0.1:28841",
			want: "export TEMPORAL_ADDRESS=127.0.0.1:27841 CANN_TRAIN_UI=http://127.0.0.1:28841"},
		{name: "exported already", address: "127.0.0.1:27841", namespace: "default", srv: "127.0.0.1:27841", srvNS: "default", srvUI: "http://127.0.0.1:28841"},
		{name: "UI off", address: "127.0.0.1:7233", namespace: "default", srv: "127.0.0.1:7233", srvNS: "default",
			want: "export TEMPORAL_ADDRESS=127.0.0.1:7233 CANN_TRAIN_UI=none"},
		{name: "UI elsewhere", address: "127.0.0.1:7233", namespace: "default", srv: "127.0.0.1:7233", srvNS: "default", srvUI: "http://127.0.0.1:30000",
			want: "export TEMPORAL_ADDRESS=127.0.0.1:7233 CANN_TRAIN_UI=http://127.0.0.1:30000"},
		{name: "CANN_TRAIN_UI names it", ui: "http://127.0.0.1:30000", address: "127.0.0.1:7233", namespace: "default", srv: "127.0.0.1:7233", srvNS: "default",
			srvUI: "http://127.0.0.1:30000"},
		{name: "shell points elsewhere", address: "remote.example:7233", namespace: "default", srv: "127.0.0.1:7233", srvNS: "default", srvUI: "http://127.0.0.1:8233",
			want: "export TEMPORAL_ADDRESS=127.0.0.1:7233 CANN_TRAIN_UI=http://127.0.0.1:8233"},
		// dev --namespace ml: this command's namespace is the server's, another terminal's is not.
		{name: "dev --namespace ml --port 17310", address: "127.0.0.1:7233", namespace: "ml", srv: "127.0.0.1:17310", srvNS: "ml", srvUI: "http://127.0.0.1:18310",
			want: "export TEMPORAL_ADDRESS=127.0.0.1:17310 TEMPORAL_NAMESPACE=ml CANN_TRAIN_UI=http://127.0.0.1:18310"},
		{name: "dev --namespace ml on the default ports", address: "127.0.0.1:7233", namespace: "ml", srv: "127.0.0.1:7233", srvNS: "ml", srvUI: "http://127.0.0.1:8233",
			want: "export TEMPORAL_ADDRESS=127.0.0.1:7233 TEMPORAL_NAMESPACE=ml CANN_TRAIN_UI=http://127.0.0.1:8233"},
		{name: "namespace exported already", nsEnv: "ml", address: "127.0.0.1:7233", namespace: "ml", srv: "127.0.0.1:7233", srvNS: "ml", srvUI: "http://127.0.0.1:8233"},
		{name: "wildcard host", address: "127.0.0.1:7233", namespace: "default", srv: "0.0.0.0:27841", srvNS: "default", srvUI: "http://0.0.0.0:28841",
			// (This host's workers too dial this host's address: at
			// 127.0.0.1 they would listen for peers on loopback.)
			want:      "export TEMPORAL_ADDRESS=10.77.0.1:27841 CANN_TRAIN_UI=http://10.77.0.1:28841",
			elsewhere: "export TEMPORAL_ADDRESS=10.77.0.1:27841 CANN_TRAIN_UI=http://10.77.0.1:28841"},
		{name: "wildcard host on the default ports", address: "127.0.0.1:7233", namespace: "default", srv: "0.0.0.0:7233", srvNS: "default", srvUI: "http://0.0.0.0:8233",
			want:      "export TEMPORAL_ADDRESS=10.77.0.1:7233 CANN_TRAIN_UI=http://10.77.0.1:8233",
			elsewhere: "export TEMPORAL_ADDRESS=10.77.0.1:7233 CANN_TRAIN_UI=http://10.77.0.1:8233"},
		{name: "wildcard host, namespace exported", nsEnv: "ml", address: "127.0.0.1:7233", namespace: "ml", srv: "[::]:7233", srvNS: "ml", srvUI: "http://[::]:8233",
			want:      "export TEMPORAL_ADDRESS=10.77.0.1:7233 CANN_TRAIN_UI=http://10.77.0.1:8233",
			elsewhere: "export TEMPORAL_ADDRESS=10.77.0.1:7233 TEMPORAL_NAMESPACE=ml CANN_TRAIN_UI=http://10.77.0.1:8233"},
		{name: "wildcard host, no address found", noHostIP: true, address: "127.0.0.1:7233", namespace: "default", srv: "0.0.0.0:27841", srvNS: "default",
			srvUI: "http://0.0.0.0:28841", want: "export TEMPORAL_ADDRESS=127.0.0.1:27841 CANN_TRAIN_UI=http://127.0.0.1:28841"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CANN_TRAIN_UI", tc.ui)
			t.Setenv("TEMPORAL_NAMESPACE", tc.nsEnv)
			e := &env{address: tc.address, namespace: tc.namespace}
			ip := hostIP
			if tc.noHostIP {
				ip = noIP
			}
			if got, elsewhere := e.reachExports(tc.srv, tc.srvNS, tc.srvUI, ip); got != tc.want || elsewhere != tc.elsewhere {
				t.Errorf("reachExports = %q, %q; want %q, %q", got, elsewhere, tc.want, tc.elsewhere)
			}
		})
	}
	if ip := thisHostIP(); ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		t.Errorf("thisHostIP() = %v: not an address another host dials", ip)
	}
}

// TestDevSaysHowToReachIt: `dev` on another port than 7233 prints the
// export line that points workers and commands in other terminals at it
// (a worker started next without it waited on 7233), with its namespace
// where that is not the one they resolve (`dev --namespace ml`: the
// server has no namespace default).
func TestDevSaysHowToReachIt(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `export TEMPORAL_ADDRESS=127\.0\.0\.1:\d+ CANN_TRAIN_UI=none`},
		{[]string{"--namespace", "ml"}, `export TEMPORAL_ADDRESS=127\.0\.0\.1:\d+ TEMPORAL_NAMESPACE=ml CANN_TRAIN_UI=none`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var out syncBuffer
		root := newRootCmd(&env{out: &out, err: io.Discard, command: childCommand})
		root.SetArgs(append([]string{"dev", "--port", "0", "--ui-port", "0", "--db-file", filepath.Join(t.TempDir(), "t.db")}, tc.args...))
		done := make(chan error, 1)
		go func() { done <- root.ExecuteContext(ctx) }()
		for !strings.Contains(out.String(), "Ctrl-C to stop.") {
			select {
			case err := <-done:
				t.Fatalf("dev %v ended: %v\n%s", tc.args, err, out.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
		cancel()
		<-done
		if !regexp.MustCompile(`(?m)^Other terminals \(workers, run, status\) reach it with: ` + tc.want + `\nCtrl-C to stop\.$`).MatchString(out.String()) {
			t.Errorf("dev %v said:\n%s", tc.args, out.String())
		}
	}
}

// TestBrowsable: a Web UI bound to every interface is shown at this
// host's address (127.0.0.1 where none is found), others as they are.
func TestBrowsable(t *testing.T) {
	host := func() net.IP { return net.ParseIP("10.77.0.1") }
	none := func() net.IP { return nil }
	for _, tc := range []struct {
		ui   string
		ip   func() net.IP
		want string
	}{
		{"http://0.0.0.0:8233", host, "http://10.77.0.1:8233"},
		{"http://[::]:8233", host, "http://10.77.0.1:8233"},
		{"http://0.0.0.0:8233", none, "http://127.0.0.1:8233"},
		{"http://127.0.0.1:8233", host, "http://127.0.0.1:8233"},
		{"", host, ""},
	} {
		if got := browsable(tc.ui, tc.ip); got != tc.want {
			t.Errorf("browsable(%q) = %q, want %q", tc.ui, got, tc.want)
		}
	}
}
