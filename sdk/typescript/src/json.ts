// The JSON form of a type: what a value of it becomes through JSON.stringify and
// JSON.parse, as a step's output does on its way through the journal.

/** Values JSON.stringify leaves out of an object, and writes as null in an array or alone. */
type Dropped = undefined | void | symbol | ((...args: any[]) => any);

/**
 * The JSON form of T: the type of `JSON.parse(JSON.stringify(v))` for a v of type T, which
 * is what `step.run` returns, on the first run as on a replay. A Date (anything with
 * toJSON) becomes what its toJSON returns (a string); undefined, a function or a symbol
 * becomes null alone or in an array, and a property of an object holding one is left out
 * (optional when it may hold one); a Map, a Set or a WeakMap becomes an empty object; a
 * bigint, which JSON.stringify refuses, becomes never. Strings, numbers, booleans and null
 * stay as they are (NaN and Infinity become null at run time, but stay number here).
 */
export type Jsonify<T> = 0 extends 1 & T ? any : unknown extends T ? unknown : T extends Dropped ? null : JsonOf<T>;

/** The JSON form of T where T is not undefined, a function or a symbol. */
type JsonOf<T> = T extends { toJSON(...args: any[]): infer J }
  ? Jsonify<J>
  : T extends string | number | boolean | null
    ? T
    : T extends bigint
      ? never
      : T extends ReadonlyMap<unknown, unknown> | ReadonlySet<unknown> | WeakMap<object, unknown> | WeakSet<object>
        ? Record<string, never>
        : T extends readonly unknown[]
          ? { [K in keyof T]: Jsonify<T[K]> }
          : T extends object
            ? JsonObject<T>
            : never;

/** The string keys of T whose property holds something JSON keeps. */
type Kept<T> = Exclude<{ [K in keyof T]: K extends symbol ? never : [Exclude<T[K], Dropped>] extends [never] ? never : K }[keyof T], undefined>;

/** The keys of T whose property may hold something JSON leaves out (optional ones included). */
type Droppable<T> = Exclude<{ [K in keyof T]: [Extract<T[K], Dropped>] extends [never] ? never : K }[keyof T], undefined>;

/** An object's JSON form: its kept properties, optional where they may be left out. */
type JsonObject<T> = Flatten<
  { [K in Exclude<Kept<T>, Droppable<T>>]: JsonOf<T[K]> } & { [K in Extract<Kept<T>, Droppable<T>>]?: JsonOf<Exclude<T[K], Dropped>> }
>;

type Flatten<T> = { [K in keyof T]: T[K] } & {};
