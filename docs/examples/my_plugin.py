"""A diffgrpo plugin: one selection policy, one reward and one task, each registered by name.

List this file in a params file (``plugins: [my_plugin.py]``, relative to that params file) and
its arms can name them: ``{name: solved, select: hard_but_solved, reward: partial_credit}``.
docs/extending.md walks through it; tests/test_plugins.py trains a tiny study with it.
"""

from diffgrpo import policies, rewards, tasks
from diffgrpo.tasks.shuffled_objects import ShuffledObjects


@policies.register("hard_but_solved", budgeted=True)
def hard_but_solved(prompts, n, rng, min_p_hat=0.0):
    """The ``n`` hardest prompts the base model solved at least once in the probe: the lowest
    p_hat above ``min_p_hat`` (an arm option), ties in a seeded order."""
    solved = prompts[prompts["p_hat"] > min_p_hat]
    if len(solved) < n:
        raise policies.SelectionError(f"hard_but_solved: {len(solved)} prompts have p_hat > {min_p_hat}, "
                                      f"fewer than the budget of {n}")
    return policies.lowest(solved, solved["p_hat"], rng).iloc[:n]


@rewards.register("partial_credit")
def partial_credit(prompts, completions, completion_ids=None, *, scores, run, **kwargs):
    """1.0 for a right answer, 0.2 for a wrong answer the task can read, 0.0 for none."""
    out = []
    for completion, score in zip(completions, scores):
        readable = run.task.extract(rewards.text(completion)) is not None
        out.append(1.0 if score else 0.2 if readable else 0.0)
    return out


@tasks.register
class FewPeopleObjects(ShuffledObjects):
    """Shuffled objects with 3 people only: a task is a class with ``name``, ``load``,
    ``extract`` and ``score`` (diffgrpo.tasks.base.Task)."""

    name = "few_people_objects"

    def __init__(self, **options):
        super().__init__(**{"people": [3, 3], **options})
