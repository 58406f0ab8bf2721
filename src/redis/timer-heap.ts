/** An entry of a `TimerHeap`: due at `at`; `heapIndex` is maintained by the heap (-1 when out). */
export interface HeapEntry {
  at: number;
  /** First tie-break among equal `at`: higher first. */
  readonly priority: number;
  /** Then lower first (arrival order). */
  readonly seq: number;
  heapIndex: number;
}

/**
 * A binary min-heap by due time, with O(log n) removal of any entry: the shared gate keeps every
 * locally waiting call in one and arms a single timer for its head.
 */
export class TimerHeap<E extends HeapEntry> {
  private readonly items: E[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): E | undefined {
    return this.items[0];
  }

  push(entry: E): void {
    entry.heapIndex = this.items.length;
    this.items.push(entry);
    this.up(entry.heapIndex);
  }

  pop(): E | undefined {
    const top = this.items[0];
    if (top !== undefined) this.remove(top);
    return top;
  }

  /** Remove `entry`; false if it was not in the heap. */
  remove(entry: E): boolean {
    const i = entry.heapIndex;
    if (i < 0 || this.items[i] !== entry) return false;
    const last = this.items.pop()!;
    entry.heapIndex = -1;
    if (last !== entry) {
      this.items[i] = last;
      last.heapIndex = i;
      this.down(i);
      this.up(last.heapIndex);
    }
    return true;
  }

  /** Every entry, in no particular order (a snapshot). */
  entries(): E[] {
    return this.items.slice();
  }

  private less(a: E, b: E): boolean {
    if (a.at !== b.at) return a.at < b.at;
    return a.priority > b.priority || (a.priority === b.priority && a.seq < b.seq);
  }

  private up(i: number): void {
    const items = this.items;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.less(items[i]!, items[parent]!)) break;
      this.swap(i, parent);
      i = parent;
    }
  }

  private down(i: number): void {
    const items = this.items;
    for (;;) {
      const left = 2 * i + 1;
      const right = left + 1;
      let smallest = i;
      if (left < items.length && this.less(items[left]!, items[smallest]!)) smallest = left;
      if (right < items.length && this.less(items[right]!, items[smallest]!)) smallest = right;
      if (smallest === i) return;
      this.swap(i, smallest);
      i = smallest;
    }
  }

  private swap(a: number, b: number): void {
    const items = this.items;
    const x = items[a]!;
    const y = items[b]!;
    items[a] = y;
    items[b] = x;
    x.heapIndex = b;
    y.heapIndex = a;
  }
}
