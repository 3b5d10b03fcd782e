// Package hfidev will drive Omni-Path/CN5000 HFI receive and send contexts
// through the hfi1 user API, as a link and a verbs backend beside the
// software one. Not built yet.
package hfidev
