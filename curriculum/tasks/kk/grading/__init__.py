"""K&K's one grader (`grader`), its readers of an answer block (`answer`) and of claims in free text (`claims`,
`claim_binder`, `claim_words`), and Logic-RL's own score (`logic_rl`)."""
