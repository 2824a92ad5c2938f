'use strict'
// The hand-written typings (ratomic.d.ts) cannot drift from ratomic.js:
// - what ratomic.d.ts declares is exactly what ratomic.js exports, class by
//   class, member by member (statics included), and the objects it returns
//   have exactly the declared fields;
// - every declaration and member has a doc comment;
// - typings.test.ts (compiled by tsc, then run) uses every one of them.
const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const ts = require('typescript')
const ratomic = require('..')

// Each hand-written typings file, the module it describes, and the typings
// test (compiled by tsc, then run) that must use all of it.
const FACES = [
  { dts: 'ratomic.d.ts', module: ratomic, typings: 'typings.test.ts', specifier: 'ratomic' },
  { dts: 'redis.d.ts', module: require('../redis.js'), typings: 'redis-types.test.ts', specifier: 'ratomic/redis' },
  { dts: 'postgres.d.ts', module: require('../postgres.js'), typings: 'postgres-types.test.ts', specifier: 'ratomic/postgres' },
]

function program(face = FACES[0]) {
  const DTS = path.join(__dirname, '..', face.dts)
  const TYPINGS = path.join(__dirname, face.typings)
  const file = ts.readConfigFile(path.join(__dirname, 'tsconfig.json'), ts.sys.readFile)
  const config = ts.parseJsonConfigFileContent(file.config, ts.sys, __dirname)
  const p = ts.createProgram([TYPINGS], { ...config.options, noEmit: true })
  const dts = p.getSourceFiles().find((f) => path.resolve(f.fileName) === DTS)
  assert.ok(dts, `${face.typings} resolves \`${face.specifier}\` to ${face.dts}`)
  return { p, dts, checker: p.getTypeChecker(), typings: TYPINGS }
}

const isStatic = (m) => (ts.getCombinedModifierFlags(m) & ts.ModifierFlags.Static) !== 0
const hasDoc = (node) => ts.getJSDocCommentsAndTags(node).some((d) => ts.isJSDoc(d) && (d.comment || (d.tags && d.tags.length)))

// The declarations of ratomic.d.ts: { name -> { node, kind, members: Map(key -> nodes) } },
// a member's key being `name` or `static name`.
function declarations(dts) {
  const out = new Map()
  for (const s of dts.statements) {
    if (ts.isVariableStatement(s)) {
      // `export declare const NAME`: a value, with no members.
      for (const d of s.declarationList.declarations) out.set(d.name.text, { node: s, kind: 'const', members: new Map(), bases: [] })
      continue
    }
    if (ts.isFunctionDeclaration(s) && s.name) {
      // `export declare function NAME` (each overload a statement): a function, with no members.
      out.set(s.name.text, { node: s, kind: 'function', members: new Map(), bases: [] })
      continue
    }
    if (!s.name) continue
    const members = new Map()
    const add = (key, node) => members.set(key, [...(members.get(key) || []), node])
    if (ts.isClassDeclaration(s)) {
      for (const m of s.members) if (m.name) add(`${isStatic(m) ? 'static ' : ''}${m.name.text}`, m)
    } else if (ts.isInterfaceDeclaration(s)) {
      for (const m of s.members) add(m.name.text, m)
    }
    const bases = (s.heritageClauses || []).flatMap((h) => h.types.map((t) => t.expression.text))
    out.set(s.name.text, { node: s, kind: ts.isClassDeclaration(s) ? 'class' : 'type', members, bases })
  }
  return out
}

// Member keys of a declared class or interface, its bases' included.
function declaredMembers(decls, name) {
  const d = decls.get(name)
  const keys = new Set(d.members.keys())
  for (const b of d.bases) for (const k of declaredMembers(decls, b)) keys.add(k)
  keys.delete('constructor')
  return keys
}

// Member keys of a runtime class: its prototype chain's and its statics'.
function runtimeMembers(Cls) {
  const keys = new Set()
  for (let p = Cls.prototype; p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const k of Object.getOwnPropertyNames(p)) if (k !== 'constructor') keys.add(k)
  }
  for (let c = Cls; c !== Function.prototype; c = Object.getPrototypeOf(c)) {
    for (const k of Object.getOwnPropertyNames(c)) if (!['length', 'name', 'prototype'].includes(k)) keys.add(`static ${k}`)
  }
  return keys
}

const sorted = (set) => [...set].sort()

for (const face of FACES) {
  const ratomic = face.module
  test(`${face.dts} declares exactly the classes its module exports, member by member`, () => {
    const decls = declarations(program(face).dts)
    const classes = [...decls].filter(([, d]) => d.kind === 'class').map(([n]) => n)
    const consts = [...decls].filter(([, d]) => d.kind === 'const').map(([n]) => n)
    const functions = [...decls].filter(([, d]) => d.kind === 'function').map(([n]) => n)
    assert.deepEqual([...classes, ...consts, ...functions].sort(), Object.keys(ratomic).sort())
    for (const name of consts) assert.equal(typeof ratomic[name], 'string', `${name} is a constant`)
    for (const name of functions) {
      assert.equal(typeof ratomic[name], 'function', `${name} is a function`)
      assert.equal(/^class\b/.test(Function.prototype.toString.call(ratomic[name])), false, `${name} is declared a function but is a class`)
    }
    for (const name of classes) {
      const declared = declaredMembers(decls, name)
      const runtime = runtimeMembers(ratomic[name])
      assert.deepEqual(sorted([...runtime].filter((k) => !declared.has(k))), [], `${name}: members not declared`)
      // A member declared on an abstract base (BaseLimiter's allow, say) lives in
      // each concrete subclass: every exported subclass must have it.
      const missing = [...declared].filter((k) => !runtime.has(k))
      const subclasses = classes.filter((c) => c !== name && ratomic[c].prototype instanceof ratomic[name])
      if (missing.length > 0) assert.ok(subclasses.length > 0, `${name}: declared but missing: ${missing}`)
      for (const sub of subclasses) {
        const theirs = runtimeMembers(ratomic[sub])
        assert.deepEqual(missing.filter((k) => !theirs.has(k)), [], `${sub} lacks members ${name} declares`)
      }
    }
  })
}

test('the objects ratomic.js returns have exactly the declared fields', () => {
  const decls = declarations(program().dts)
  const fields = (name) => sorted(declaredMembers(decls, name))
  const { TokenBucket, FixedWindow, Limiter, Stack, DirectTokenBucket, ManualClock } = ratomic
  const clock = new ManualClock()
  const tb = new TokenBucket(1, 1, { clock })
  assert.deepEqual(Object.keys(tb.allow('k')).sort(), fields('Decision'))
  assert.deepEqual(Object.keys(tb.allowMany(['k'])[0]).sort(), fields('Decision'))
  const direct = new DirectTokenBucket(1, 1, { clock })
  for (const d of [direct.allow(), direct.peek()]) assert.deepEqual(Object.keys(d).sort(), fields('Decision'))
  const l = new Limiter({ a: '1/s', w: { algorithm: 'fixedWindow', rate: '5/s' } }, { clock })
  for (const d of [l.allow('k'), l.peek('k'), l.allowMany(['k'])[0], new Stack({ tb, l }).allow(['k', 'k'])]) {
    assert.deepEqual(Object.keys(d).sort(), fields('MultiDecision'))
    assert.deepEqual(Object.keys(d.entries[0]).sort(), fields('NamedDecision'))
  }
  // RuleInfo: one object type per algorithm family.
  const ruleInfo = decls.get('RuleInfo').node.type.types.map((t) => sorted(new Set(t.members.map((m) => m.name.text))))
  assert.deepEqual(Object.keys(tb.rule).sort(), ruleInfo[0])
  assert.deepEqual(Object.keys(direct.rule).sort(), ruleInfo[0])
  assert.deepEqual(Object.keys(new FixedWindow('5/s').rule).sort(), ruleInfo[1])
  assert.deepEqual(Object.keys(l.rules.w).sort(), ruleInfo[1])
})

for (const face of FACES) {
  test(`every declaration and member of ${face.dts} has a doc comment`, () => {
    const { dts } = program(face)
    const missing = []
    for (const [name, d] of declarations(dts)) {
      if (!hasDoc(d.node)) missing.push(name)
      for (const [key, nodes] of d.members) if (!nodes.some(hasDoc)) missing.push(`${name}.${key}`)
    }
    // The object types of a union (RuleInfo) document their fields too.
    ts.forEachChild(dts, function visit(node) {
      if (ts.isTypeLiteralNode(node) && ts.isUnionTypeNode(node.parent) && ts.isTypeAliasDeclaration(node.parent.parent)) {
        for (const m of node.members) if (!hasDoc(m)) missing.push(`${node.parent.parent.name.text}.${m.name.text}`)
      }
      ts.forEachChild(node, visit)
    })
    assert.deepEqual(missing, [])
  })

}

for (const face of FACES) {
  test(`${face.typings} uses every declaration and member of ${face.dts}`, () => {
    const { p, dts, checker, typings: TYPINGS } = program(face)
    const decls = declarations(dts)
    const used = new Set()
    const mark = (symbol) => {
      if (!symbol) return
      if (symbol.flags & ts.SymbolFlags.Alias) symbol = checker.getAliasedSymbol(symbol)
      for (const d of symbol.declarations || []) {
        if (d.getSourceFile() !== dts) continue
        const owner = d.parent && (ts.isClassDeclaration(d.parent) || ts.isInterfaceDeclaration(d.parent)) ? d.parent : null
        if (owner) used.add(`${owner.name.text}.${isStatic(d) ? 'static ' : ''}${d.name.text}`)
        else if (d.name) used.add(d.name.text)
      }
    }
    ts.forEachChild(p.getSourceFile(TYPINGS), function visit(node) {
      if (ts.isIdentifier(node)) mark(checker.getSymbolAtLocation(node))
      // A field of an object literal counts as a use of the declared field it fills.
      if ((ts.isPropertyAssignment(node) || ts.isShorthandPropertyAssignment(node)) && ts.isObjectLiteralExpression(node.parent)) {
        const type = checker.getContextualType(node.parent)
        if (type) mark(type.getProperty(node.name.text))
      }
      ts.forEachChild(node, visit)
    })
    const unused = []
    for (const [name, d] of decls) {
      if (!used.has(name)) unused.push(name)
      for (const key of d.members.keys()) if (key !== 'constructor' && !used.has(`${name}.${key}`)) unused.push(`${name}.${key}`)
    }
    assert.deepEqual(unused, [])
  })
}
