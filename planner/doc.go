// Package planner is the raft-replicated Trident planner server: a hashicorp/raft node
// (raft-boltdb log and stable store, file snapshots, TCP transport) whose FSM is package
// planner/fsm, an HTTP API (optionally TLS, ACL token in X-Trident-Token) through which
// followers forward writes to the leader, and, on the leader only, the periodic
// rescheduling loop of the Trident paper (Algorithm 2) that commits decisions to raft and
// then hands them to an Actuator (planner/nomadact for Nomad).
//
// # HTTP API
//
// Every request except GET /v1/status needs the token (when configured) in the
// X-Trident-Token header; a wrong or missing token gets 403. Every response carries
// X-Trident-Leader (leader ID as this server knows it) and X-Trident-Index (its last applied
// raft index). Reads are served from the local replica; writes on a follower are forwarded
// to the leader (its URL comes from -peers id=raft_addr@http_url), or answered 503 with
// {"error", "leader_id", "leader_http_addr", "leader_raft_addr"} when it cannot forward.
// Errors are {"error": "..."}: 400 malformed body (NaN/Inf are not JSON numbers), 404 unknown
// job, 409 busy/conflict, 422 rejected by validation or the FSM (state unchanged), 503 no
// leader.
//
//	GET    /v1/status                   StatusResponse: id, state, leader_id, leader_raft_addr,
//	                                    leader_http_addr, term, last_index, applied_index,
//	                                    peers[{id, raft_addr, suffrage}], pipelines, decisions
//	GET    /v1/pipelines                [{job, operators[fsm.Operator], registered_index}]
//	GET    /v1/pipelines/{job}          {job, operators, registered_index}
//	PUT    /v1/pipelines/{job}          body {"job": <Nomad job JSON>} or empty (read the job
//	                                    from Nomad) -> {job, index, operators}
//	DELETE /v1/pipelines/{job}          -> {index}
//	POST   /v1/pipelines/{job}/apply    ApplyRequest {group, count, reason, meta} (trident-target)
//	                                    -> 202 {job, decision_index, status}; 409 while applying
//	GET    /v1/plan/{job}               PlanResponse {job, decision_index, reason, source, status,
//	                                    throughput, failed_decision_index?, plan_error?, groups: {<op>:
//	                                    {count, reason, decision_index, nodes: {<node>: {current,
//	                                    candidate}}, config, config_epoch, candidate_config,
//	                                    transitions, observation_epoch}}}
//	POST   /v1/observations             ObservationRequest or an array of them: {job, operator,
//	                                    capacity, std, epoch, unix_ms, backlog}, applied atomically ->
//	                                    {index, accepted, ignored: [{index, reason}]}. epoch is
//	                                    the instances' trident_config_epoch: == config_epoch
//	                                    updates the operator's capacity, == config_epoch+1 during
//	                                    a transition updates the candidate's; others are ignored.
//	                                    (with either, backlog: records queued for the operator,
//	                                    the -catch-up term)
//	PUT    /v1/candidates/{job}/{op}    CandidateRequest {config, capacity, cold_start_s} -> {index}
//	DELETE /v1/candidates/{job}/{op}    drop a candidate no instance runs yet -> {index}
//	GET    /v1/decisions?job=&since=    [fsm.Decision] (append-only log, raft index order)
//	GET    /v1/inventory                [fsm.Node]
//	PUT    /v1/inventory                [fsm.Node] (tests; the leader refreshes it from Nomad)
//	GET    /v1/state                    the whole fsm.State
//	POST   /v1/leadership/transfer      {"id": ""|<server>} -> {leader_id, leader_http_addr}
//	POST   /v1/snapshot                 take a raft snapshot now -> {id, index, term}
package planner
