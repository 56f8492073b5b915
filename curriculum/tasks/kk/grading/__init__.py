"""K&K's one grader (`grader.grade`: training rewards and validation accuracy both call it) and its parsing:
an answer block (`answer_parse`, `answer_tables`), claims in free text (`claims`, `claim_binder`,
`claim_feed`, `claim_words`), the reasoning's agreement with the answer (`reasoning`), lenient accuracy
(`lenient`) and Logic-RL's own score (`logic_rl`). It lives with the puzzles it grades, below `train/` and
`eval/`; the K&K task (`curriculum.tasks.kk.KKTask`) grades with it.
"""
