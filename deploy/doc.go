// Package deploy holds no code: the Prometheus configuration and the
// Grafana dashboard and provisioning that docker-compose.yml runs. Its test
// checks that every metric the dashboard queries exists on a live
// allocator and a live client.
package deploy
