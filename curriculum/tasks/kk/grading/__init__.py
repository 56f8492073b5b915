"""K&K's one grader (`grader`: training rewards and validation accuracy both call it; the reasoning's agreement
and lenient accuracy), its readers of an answer block (`answer`) and of claims in free text (`claims`,
`claim_binder`, `claim_words`), and Logic-RL's own score (`logic_rl`).
"""
