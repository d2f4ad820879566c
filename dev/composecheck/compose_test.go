package composecheck

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

func load(t *testing.T) *types.Project {
	t.Helper()
	path, err := filepath.Abs("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(path),
		ConfigFiles: []types.ConfigFile{{Filename: path}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("cann-train", true) })
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

func flag(cmd []string, name string) string {
	for i, a := range cmd {
		if a == name && i+1 < len(cmd) {
			return cmd[i+1]
		}
	}
	return ""
}

func TestComposeServices(t *testing.T) {
	p := load(t)
	for _, name := range []string{"postgresql", "temporal", "temporal-ui", "minio", "control", "node-1", "node-2", "node-3"} {
		if _, ok := p.Services[name]; !ok {
			t.Errorf("service %q missing", name)
		}
	}
	published := func(svc string, port uint32) bool {
		for _, pc := range p.Services[svc].Ports {
			if pc.Target == port && pc.Published != "" {
				return true
			}
		}
		return false
	}
	for svc, port := range map[string]uint32{"temporal": 7233, "temporal-ui": 8080, "minio": 9000} {
		if !published(svc, port) {
			t.Errorf("%s does not publish port %d", svc, port)
		}
	}
	if p.Services["temporal"].Environment["DB"] == nil || *p.Services["temporal"].Environment["DB"] != "postgres12" {
		t.Errorf("temporal is not configured for PostgreSQL")
	}
}

func TestComposeWorkersWiring(t *testing.T) {
	p := load(t)
	ids := map[string]bool{}
	nodes := 0
	for name, svc := range p.Services {
		cmd := []string(svc.Command)
		if len(cmd) < 2 || cmd[0] != "worker" {
			continue
		}
		if addr := svc.Environment["TEMPORAL_ADDRESS"]; addr == nil || *addr != "temporal:7233" {
			t.Errorf("%s: TEMPORAL_ADDRESS = %v, want temporal:7233", name, addr)
		}
		if _, ok := svc.DependsOn["temporal-setup"]; !ok {
			t.Errorf("%s does not wait for temporal-setup", name)
		}
		switch cmd[1] {
		case "control":
			if flag(cmd, "--metrics-listen") == "" {
				t.Errorf("%s serves no metrics (--metrics-listen)", name)
			}
		case "node":
			nodes++
			id := flag(cmd, "--id")
			if id == "" || ids[id] {
				t.Errorf("%s: node id %q missing or duplicated", name, id)
			}
			ids[id] = true
			// The worker's stop grace (--stop-grace, 25s by default) and
			// its leaving the cluster must fit before compose's SIGKILL.
			if g := svc.StopGracePeriod; g == nil || time.Duration(*g) < 30*time.Second {
				t.Errorf("%s: stop_grace_period %v, want ≥ 30s (the node's stop grace, 25s, and its leaving)", name, g)
			}
			adv := flag(cmd, "--comm-advertise")
			if host, _, _ := strings.Cut(adv, ":"); host != name {
				t.Errorf("%s advertises %q: peers could not reach it", name, adv)
			}
			u, err := url.Parse(flag(cmd, "--checkpoint-url"))
			if err != nil || u.Scheme != "s3" {
				t.Errorf("%s: checkpoint URL %q is not s3://", name, flag(cmd, "--checkpoint-url"))
				continue
			}
			ep, err := url.Parse(u.Query().Get("endpoint"))
			if err != nil || ep.Hostname() != "minio" {
				t.Errorf("%s: checkpoint endpoint %q is not the minio service", name, u.Query().Get("endpoint"))
			}
			for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
				if svc.Environment[k] == nil {
					t.Errorf("%s lacks %s for MinIO", name, k)
				}
			}
		default:
			t.Errorf("%s: unknown worker kind %q", name, cmd[1])
		}
	}
	if nodes < 3 {
		t.Errorf("%d node workers, want ≥ 3", nodes)
	}
	setup := strings.Join(p.Services["temporal-setup"].Command, " ")
	for _, sa := range []string{"CannModel", "CannNodes", "CannStep", "CannStatus", "CannStrategy"} {
		if !strings.Contains(setup, sa) {
			t.Errorf("temporal-setup does not register search attribute %s", sa)
		}
	}
	if !strings.Contains(strings.Join(p.Services["minio-setup"].Command, " "), "checkpoints") {
		t.Errorf("minio-setup does not create the checkpoints bucket")
	}
}
