package main

import "github.com/agentry-dev/agentry/event"

// typeUnjailedServing is the event a door (serve, mcp) emits when it starts
// with --allow-unjailed; its payload is an *unjailedServing. init registers
// it with package event, so `agentry events` reads it back.
const typeUnjailedServing event.Type = "agentry.door.unjailed"

func init() {
	event.Register(typeUnjailedServing, func() any { return new(unjailedServing) })
}

// unjailedServing records a door started with --allow-unjailed: several
// principals, or a listener beyond loopback, with model code unjailed.
type unjailedServing struct {
	Command        string `json:"command"`
	RunnerID       string `json:"runnerId"`
	Principals     int    `json:"principals"`
	Addr           string `json:"addr"`
	BeyondLoopback bool   `json:"beyondLoopback"`
	// Why says why the code is not jailed.
	Why string `json:"why"`
}
