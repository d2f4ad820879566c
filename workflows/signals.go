package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/workflow"
)

// receive takes the value a selector found ready on c into v (and returns
// its JSON), decoded as
// the SDK's JSON converter would (json.Unmarshal; a signal sent without
// a payload leaves v as it is). A payload that does not decode — a signal
// sent by hand in the wrong shape, `temporal workflow signal --input
// '{"nodes": "two"}'` — is an error for the caller to report. With
// c.Receive the SDK would drop it and block for the next value on the
// coroutine of the context it was given; from a selector callback that
// is not the running one, and every workflow task of the run panicked
// from then on.
func receive(c workflow.ReceiveChannel, v any) (json.RawMessage, error) {
	var raw json.RawMessage
	if !c.ReceiveAsync(&raw) {
		// (the SDK logged why: a payload in an encoding other than JSON)
		return nil, errors.New("its payload is not JSON")
	}
	if len(raw) == 0 {
		return raw, nil
	}
	if !json.Valid(raw) { // (a binary payload)
		return raw, fmt.Errorf("its payload (%d bytes) is not JSON", len(raw))
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return raw, fmt.Errorf("its payload %s: %w", clipPayload(raw), err)
	}
	return raw, nil
}

// onSignal adds ch to sel: each value it takes decoded by receive and
// handed to do; one whose payload does not decode to refuse.
func onSignal[T any](sel workflow.Selector, ch workflow.ReceiveChannel, refuse func(error), do func(T)) {
	onCheckedSignal(sel, ch, refuse, func(v T, _ json.RawMessage) error {
		do(v)
		return nil
	})
}

// onCheckedSignal is onSignal whose do also sees the payload's JSON and
// may refuse the value (an error, handed to refuse).
func onCheckedSignal[T any](sel workflow.Selector, ch workflow.ReceiveChannel, refuse func(error), do func(T, json.RawMessage) error) {
	sel.AddReceive(ch, func(c workflow.ReceiveChannel, _ bool) {
		var v T
		raw, err := receive(c, &v)
		if err == nil {
			err = do(v, raw)
		}
		if err != nil {
			refuse(err)
		}
	})
}

// unknownField names the first field of raw JSON that v does not have
// (nil when there is none, or raw does not decode at all).
func unknownField(raw json.RawMessage, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil && strings.Contains(err.Error(), "unknown field") {
		return err
	}
	return nil
}

// clipPayload is a payload short enough for a status line.
func clipPayload(raw json.RawMessage) string {
	const most = 120
	if len(raw) <= most {
		return string(raw)
	}
	return string(raw[:most]) + "…"
}
