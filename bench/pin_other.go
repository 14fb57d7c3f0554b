//go:build !linux

package main

import (
	"context"
	"errors"
	"os/exec"
)

type pinner struct{}

func (h *harness) pinStart(context.Context, []string, []string, int) (*pinner, error) {
	return nil, errors.New("--pin-relay needs Linux")
}

func (p *pinner) stop() error { return nil }

const burnCommand = "__burn"

func burnMain() int { return 2 }

func spawnBurner(context.Context) (*exec.Cmd, error) {
	return nil, errors.New("--pin-relay needs Linux")
}
