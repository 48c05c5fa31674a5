"""The no-op replay adapter and agent-state store both reference baselines use.

`children.py` and `default_path.py` import it (python puts a script's own
directory on `sys.path`). Every call returns a fixed value: one fixed
digest, one passing check, thread-safe child leases, allow verdicts; a
binding, a child and an agent state are plain objects. No isolation, no
copies.
"""

DIGEST = "sha256:noop"


def noop_replay(replay):
    """(ReplayAdapter class, AgentStates class, fidelity) for the reference's
    `replay_runtime` module `replay`; subclass the adapter to add the
    episode protocol."""

    fidelity = replay.ReplayFidelity.SEMANTIC_EQUIVALENT

    def report():
        return replay.EquivalenceReport(
            achieved_fidelity=fidelity,
            equivalent=True,
            expected_digest=DIGEST,
            observed_digest=DIGEST,
            checks=(replay.EquivalenceCheck(check_id="noop", passed=True),),
        )

    allow = replay.ReplayRiskAssessment(
        disposition=replay.ReplayRiskDisposition.ALLOW, policy_id="noop"
    )

    class NoopReplayAdapter:
        """Every call returns a fixed value; a child is a plain object."""

        def capture_replay_state(self, request):
            return replay.AdapterStateLease(
                binding_key=object(), fidelity=fidelity, projection_digest=DIGEST
            )

        def restore_replay_state(self, binding_key, request):
            return replay.RestoreReceipt(achieved_fidelity=fidelity)

        def validate_replay_equivalence(self, binding_key, receipt):
            return report()

        def release_replay_state(self, binding_key):
            return None

        def fork_replay_child(self, binding_key, request):
            return replay.ReplayChildLease(
                child_key=object(),
                receipt=replay.RestoreReceipt(
                    achieved_fidelity=fidelity,
                    restored_projection_digest=DIGEST,
                    prefix_reused=True,
                ),
                concurrency=replay.ReplayChildConcurrency.THREAD_SAFE,
            )

        def validate_replay_child_equivalence(self, child_key, receipt):
            return report()

        def release_replay_child(self, child_key):
            return None

        def assess_replay_child_intent(self, child_key, intent):
            return allow

        def assess_replay_child_outcome(self, child_key, intent, outcome):
            return allow

    class AgentStates:
        """An in-memory agent-state store of plain objects."""

        def capture_agent_state(self, cursor):
            return object()

        def restore_agent_state(self, state_key):
            return None

        def release_agent_state(self, state_key):
            return None

        def fork_agent_state(self, state_key, child_id):
            return object()

    return NoopReplayAdapter, AgentStates, fidelity
