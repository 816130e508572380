"""The kit's fault model, shared by the fault IMDS and the EC2 gate.

It imports nothing of either (nor of cnikit), so both build on it and `fault_imds` ships
without `cnikit`:

- `faultcore.fault`: the base `Fault` (duration and expiry, the one probability roll, the
  one meaning of jitter) and `Kinds`, a registry a kind joins by defining its class;
- `faultcore.registry`: `Registry`, the one way every kind of thing the kit lets a file add
  (fault kinds and stages, nemesis actions, checkers, cost rules, scenarios, profiles, the
  gate's actions) is registered by name, a duplicate refused with both files named;
- `faultcore.errors`: one-line errors (`OneLineError`, `SpecError`);
- `faultcore.wire`: the one HTTP shape of both fault APIs (needs aiohttp);
- `faultcore.cli`: the one-line-error runner of a click group (needs click), and the wait
  of a foreground server for the signal that stops it;
- `faultcore.caller`: the header that marks the fault IMDS's own EC2 calls;
- `faultcore.freshness`: an in-process EC2's change counter, which the IMDS waits on so
  that, without a fault, it never answers behind EC2;
- `faultcore.suggest`: the did-you-mean of a refused name;
- `faultcore.version`: what `--version` prints (needs click).
"""
