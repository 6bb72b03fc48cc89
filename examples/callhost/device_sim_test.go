//go:build !cuda

package main

// hostDevice is the device the test's host serves: the simulated one.
var hostDevice = []string{"--device", "sim", "--sim-clock", "zero"}
