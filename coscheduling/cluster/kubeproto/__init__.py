"""The Kubernetes API's protobuf messages, generated from proto/k8s.io by `make proto`: do not edit."""
