"""Answer grading lives in the core (`tokenrouter.tasks.grading`: the local pair's build checks itself with it);
this name stays for scripts that grade with the harness's old import path."""

from tokenrouter.tasks.grading import extract_answer, extract_choice, final_text, is_correct, last_boxed  # noqa: F401
