//go:build !linux

package main

import (
	"context"
	"errors"
)

type pinner struct{}

func (h *harness) pinStart(context.Context, []string, []string, int) (*pinner, error) {
	return nil, errors.New("--pin-relay needs Linux")
}

func (p *pinner) stop() error { return nil }
