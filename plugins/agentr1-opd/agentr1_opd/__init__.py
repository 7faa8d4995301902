"""agentr1-opd: online policy distillation. The student samples its own multi-turn episodes; a teacher model scores
every sampled action token given that step's observation; the per-token log-ratio is the student's advantage."""
