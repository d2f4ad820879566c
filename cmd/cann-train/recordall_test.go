package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/workers"
)

// recordAllHistories, when CANN_TRAIN_RECORD_ALL names a directory, writes
// the history of every workflow execution srv holds as the test ends
// (before srv stops: call it after registering srv.Stop's cleanup) — the
// source of new replay histories: run the e2e tests with it, pick the
// histories that pass through a change, and copy them under a new name to
// workflows/testdata (recordHistory records one chosen run instead).
func recordAllHistories(t *testing.T, srv *dev.Server) {
	dir := os.Getenv("CANN_TRAIN_RECORD_ALL")
	if dir == "" {
		return
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := workers.Dial(ctx, workers.ClientOptions{Address: srv.FrontendAddr()})
		if err != nil {
			t.Logf("record all: %v", err)
			return
		}
		defer c.Close()
		var token []byte
		for {
			resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: srv.Namespace(), NextPageToken: token})
			if err != nil {
				t.Logf("record all: list: %v", err)
				return
			}
			for _, ex := range resp.Executions {
				id, runID := ex.Execution.GetWorkflowId(), ex.Execution.GetRunId()
				h, err := historyOf(ctx, c, id, runID)
				if err != nil {
					t.Logf("record all: %s/%s: %v", id, runID, err)
					continue
				}
				b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
				if err != nil {
					t.Logf("record all: %v", err)
					continue
				}
				name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name() + "__" + id + "__" + runID[:8] + ".json")
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Logf("record all: %v", err)
				}
			}
			if token = resp.NextPageToken; len(token) == 0 {
				return
			}
		}
	})
}

// historyOf reads one execution's whole history.
func historyOf(ctx context.Context, c client.Client, id, runID string) (*history.History, error) {
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &history.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, err
		}
		h.Events = append(h.Events, ev)
	}
	return h, nil
}
