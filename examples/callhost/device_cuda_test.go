//go:build cuda

package main

// hostDevice is the device the test's host serves: with the cuda tag, GPU
// 0, where axpy is cuBLAS's cublasSaxpy.
var hostDevice = []string{"--device", "cuda", "--ordinal", "0"}
