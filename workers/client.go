package workers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cann-train/cann-train/spec"
)

// ClientOptions says which Temporal to talk to.
type ClientOptions struct {
	Address   string // host:port of the frontend, default 127.0.0.1:7233
	Namespace string // default "default"
	Logger    *zap.Logger
	// MetricsHandler receives the SDK's and the workflows' metrics (see
	// ServeMetrics); nil drops them.
	MetricsHandler client.MetricsHandler
	// Connection is how to reach the frontend besides its address and
	// namespace — TLS (ConnectionOptions), Credentials (an API key),
	// HeadersProvider (gRPC metadata) —, as Temporal's client environment
	// configuration sets them up (go.temporal.io/sdk/contrib/envconfig).
	// Zero: plain gRPC.
	Connection client.Options
}

// Dial connects to Temporal and checks that its namespace exists
// (checkNamespace).
func Dial(ctx context.Context, o ClientOptions) (client.Client, error) {
	if o.Address == "" {
		o.Address = "127.0.0.1:7233"
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	opts := o.Connection
	opts.HostPort, opts.Namespace = o.Address, o.Namespace
	opts.Logger = SDKLogger(o.Logger.WithOptions(zap.IncreaseLevel(zap.WarnLevel)))
	opts.MetricsHandler = o.MetricsHandler
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		how := "plain gRPC"
		if opts.ConnectionOptions.TLS != nil {
			how = "TLS"
		}
		hint := "--address or TEMPORAL_ADDRESS names another, `cann-train dev` starts one here"
		switch {
		case tlsRefused(err) && opts.ConnectionOptions.TLS != nil:
			hint = "the TLS handshake failed: a frontend without TLS (TEMPORAL_TLS, an API key or the profile turned it on), or a certificate not trusted"
		case strings.Contains(err.Error(), "no children to pick from") || strings.Contains(err.Error(), "produced zero addresses"):
			hint = "the address does not resolve to any host"
		}
		return nil, fmt.Errorf("dial Temporal at %s (namespace %s, %s; %s): %w", o.Address, o.Namespace, how, hint, err)
	}
	if err := checkNamespace(ctx, c.WorkflowService(), o.Address, o.Namespace); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// namespaceDescriber is the part of the workflow service checkNamespace
// uses.
type namespaceDescriber interface {
	DescribeNamespace(ctx context.Context, in *workflowservice.DescribeNamespaceRequest, opts ...grpc.CallOption) (*workflowservice.DescribeNamespaceResponse, error)
}

// checkNamespace fails at once, naming the server and the fix, where the
// server at address has no namespace ns — the SDK's dial does not check,
// and every call after would fail on it, the node worker's after waiting
// for a control worker. A server that does not let these credentials
// describe the namespace (PermissionDenied: an API key scoped to less)
// or does not implement it cannot be checked, and passes: the calls that
// need it say what they may not do. Unreachable, the error says so
// (DialWaiting waits).
func checkNamespace(ctx context.Context, ws namespaceDescriber, address, ns string) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := ws.DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
	var notFound *serviceerror.NamespaceNotFound
	switch {
	case err == nil:
		return nil
	case errors.As(err, &notFound) || status.Code(err) == codes.NotFound:
		return fmt.Errorf("namespace %q does not exist on %s (--namespace / TEMPORAL_NAMESPACE; create it: temporal operator namespace create -n %s): %w",
			ns, address, ns, err)
	case unreachable(err):
		return fmt.Errorf("describe namespace %q on %s: %w", ns, address, err)
	}
	return nil // (PermissionDenied, Unimplemented, …: not checked)
}

// DialWaiting is Dial for a worker process, which may start before its
// Temporal server (a host booting, pods of one deployment starting
// together): while the frontend does not answer (Unavailable, or no
// answer in time) it logs why and tries again, after 1 s, then twice as
// long each time up to dialRetryMax, until ctx ends. Any other error —
// a TLS or credentials problem, an unknown namespace (Dial checks it) —
// is returned at once: waiting would not cure it.
func DialWaiting(ctx context.Context, o ClientOptions, log *zap.Logger) (client.Client, error) {
	wait := time.Second
	for {
		c, err := Dial(ctx, o)
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return c, err
		}
		log.Warn("Temporal does not answer yet; trying again", zap.Duration("in", wait), zap.Error(err))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (stopped waiting: %w)", err, context.Cause(ctx))
		case <-time.After(wait):
		}
		wait = min(2*wait, dialRetryMax)
	}
}

// dialRetryMax bounds the wait between DialWaiting's tries.
const dialRetryMax = 15 * time.Second

// unreachable reports whether err says that the frontend did not answer
// (as opposed to answering no).
func unreachable(err error) bool {
	if tlsRefused(err) {
		return false // (gRPC reports it as Unavailable)
	}
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	if errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) { // (a wrapped gRPC status too)
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// tlsRefused reports whether err is a failed TLS handshake — TLS against
// a plaintext frontend, an untrusted or wrong certificate —, which gRPC
// reports only in words, under codes.Unavailable.
func tlsRefused(err error) bool {
	return strings.Contains(err.Error(), "authentication handshake failed")
}

// ControlWorkerPolls reports whether the server lists a poller on the
// control task queue: without one, queries of the TrainingRun and Cluster
// workflows wait out their deadline. err is the server's when it cannot
// say.
func ControlWorkerPolls(ctx context.Context, c client.Client) (bool, error) {
	tq, err := c.DescribeTaskQueue(ctx, spec.ControlTaskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return false, fmt.Errorf("describe task queue %s: %w", spec.ControlTaskQueue, err)
	}
	return len(tq.GetPollers()) > 0, nil
}

// SearchAttributes are the custom attributes the workflows upsert.
func SearchAttributes() map[string]enumspb.IndexedValueType {
	return map[string]enumspb.IndexedValueType{
		spec.SearchAttrModel:    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		spec.SearchAttrNodes:    enumspb.INDEXED_VALUE_TYPE_INT,
		spec.SearchAttrStep:     enumspb.INDEXED_VALUE_TYPE_INT,
		spec.SearchAttrStatus:   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		spec.SearchAttrStrategy: enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	}
}

// EnsureSearchAttributes registers the missing custom search attributes.
// A workflow that upserts an unregistered attribute fails its tasks
// forever, so the control worker calls this before it serves workflows.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	ops := c.OperatorService()
	have, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range SearchAttributes() {
		if _, ok := have.GetCustomAttributes()[name]; !ok {
			missing[name] = typ
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing,
	}); err != nil {
		return fmt.Errorf("register search attributes %v (or register them with `temporal operator search-attribute create`; "+
			"on Temporal Cloud, `tcld namespace search-attributes add`): %w", missing, err)
	}
	return nil
}
