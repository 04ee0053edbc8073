"""Bound values: the copy head's binding classifier picks, before a tool-call turn, which words of the user's
request fill which declared parameter, and the turn's constraint then allows exactly those words there.

The copy head (:mod:`model.copy_head`) is trained with dense binding supervision: every token of the last user
message is labelled with the declared parameter whose value it states, or "none", scored against the encoder's
state at that parameter's name in the declaration (:meth:`model.copy_head.CopyHead.binding_logits`; the labels
come from :mod:`model.training.labels`). On held-out requests that classifier gives the right span more often
than the denoising loop copies it (docs/TRAINING.md, "Bound values"), so a turn can use it as a constraint:

1. encode the prompt once and label each token of the last user message (argmax over "none" and the declared
   parameters of every tool);
2. the labelled tokens of each parameter form runs, widened to whole words, names and quoted values
   (:func:`binding_runs`, :func:`model.binding.labelling._word_span`); the request's numbers are shared out one
   to one among each tool's labelled number parameters by the classifier's posteriors (:func:`assign_numbers`; a
   percentage is read as a fraction); a number parameter keeps only the numbers its runs spell
   (:func:`typed_runs`); a parameter left with one run is bound to its text; the lists of numbers the request
   writes go to the list parameters, and any other list may hold only the request's numbers
   (:func:`number_arrays`); a string parameter keeps one run, the one the classifier scores highest among those
   that do not only name the tool, and a required string parameter of a tool the turn calls that is on no run
   takes the request word it scores highest, and two that form an ordered pair (``start_location``,
   ``end_location``; numbers too) take their values in the request's order (:func:`one_string`); a boolean
   parameter the request names is true, false after a negation (:func:`named_flags`);
   the request's own words then bind what the classifier misses or cuts (:mod:`model.binding.cues`: the place
   after "in", the value next to a parameter's name word, unit systems, currencies as ISO codes;
   :mod:`model.binding.forms`: dates in the format the description names, identifiers such as "CA123456");
3. the turn's *constraint* (never the prompt the model reads) then follows the binding
   (:func:`pin_bound_values`):

   * a bound string parameter allows only its text (``enum: [text]``), and also the ISO form of a spoken date
     (``December 16, 2022`` -> ``2022-12-16``); a bound integer or number parameter allows only the number its
     text spells; a bound ``enum`` parameter allows only the option its text names as a whole word ("in metric
     units" -> ``metric``); each only when the parameter's own schema accepts the value;
   * a bound parameter becomes required, and an optional parameter no request word is bound to is left out,
     in every tool with at least one bound parameter;
   * when any parameter is bound, only the tools with a bound parameter can be called (a named
     ``tool_choice`` keeps its tool); when the request names one tool's name better than any other's ("the
     capital of Brazil": ``country_info.capital``), only that tool can be called (:func:`named_tool_of`);
   * when something is bound and no parameter has several runs, the turn holds one call
     (:func:`single_call`; several runs, as "in Berlin and in Paris", leave parallel calls open);
   * a parameter the request gives a list of values for, or two tools with values of their own (a clause
     each: "..., and also ..."), make a call plan (:func:`listed_values`, :func:`plan_calls`,
     :func:`bind_turn`): one call per item or tool, in the request's order, and the constraint allows exactly
     that sequence.

:func:`bind_turn` applies all of it in order.

The model still chooses between the tools left, which of them to call and every value the classifier left
unbound. On the held-out split these rules took exact calls from 0.31 (values only) to 0.775, and BFCL
simple_python from 0.045 to 0.42 (docs/TRAINING.md, "Experiment 2026-12-03 (4)", "Experiment 2026-12-04", "(2)",
"(3)", "(4)" and "Experiment 2026-12-05").
Slot-filling taggers decide binding the same way, from per-token labels (Mesnil et al. 2015, "Using Recurrent
Neural Networks for Slot Filling in Spoken Language Understanding").
"""

from model.binding.labelling import Labelling, binding_runs, bound_spans, label_request
from model.binding.plan import listed_values, plan_calls
from model.binding.rules import (
    HeldArrays,
    assign_numbers,
    named_flags,
    named_tool_of,
    number_arrays,
    one_string,
    pin_bound_values,
    single_call,
    typed_runs,
)
from model.binding.turn import TurnBinding, bind_turn

__all__ = [
    "HeldArrays",
    "Labelling",
    "TurnBinding",
    "assign_numbers",
    "bind_turn",
    "binding_runs",
    "bound_spans",
    "label_request",
    "listed_values",
    "named_flags",
    "named_tool_of",
    "number_arrays",
    "one_string",
    "pin_bound_values",
    "plan_calls",
    "single_call",
    "typed_runs",
]
