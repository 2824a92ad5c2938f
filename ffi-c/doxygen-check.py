#!/usr/bin/env python3
"""Checks doxygen's XML for include/ratomic.h: every function documents each
parameter (@param) and, unless it returns void, its return value (@return or
@retval). Usage: doxygen-check.py <doxygen xml dir>. Exits 1 on a gap."""
import sys
import xml.etree.ElementTree as ET

root = ET.parse(f"{sys.argv[1]}/ratomic_8h.xml").getroot()
gaps, functions = [], 0
for m in root.iter("memberdef"):
    if m.get("kind") != "function":
        continue
    functions += 1
    name = m.findtext("name")
    doc = m.find("detaileddescription")
    documented = {n.text for n in doc.iter("parametername")} if doc is not None else set()
    for p in m.findall("param"):
        declname = p.findtext("declname")
        if declname and declname not in documented:
            gaps.append(f"{name}: parameter {declname} has no @param")
    returns = doc is not None and (
        any(s.get("kind") == "return" for s in doc.iter("simplesect"))
        or any(pl.get("kind") == "retval" for pl in doc.iter("parameterlist"))
    )
    if (m.findtext("type") or "").strip() != "void" and not returns:
        gaps.append(f"{name}: no @return or @retval")
for g in gaps:
    print(g, file=sys.stderr)
if gaps or functions == 0:
    sys.exit(1)
print(f"{functions} functions, every parameter and return value documented")
